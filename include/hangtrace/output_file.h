// Writing output files. hangtrace runs as root and is pointed at paths in
// directories other users can write to (/tmp, a shared bundle directory), so
// every file it writes goes through here:
//
// - A new path or a regular file is replaced atomically: the content goes to a
//   temporary file with an unpredictable name, created with O_EXCL|O_NOFOLLOW
//   in the same directory (a name planted there is never opened, a link never
//   followed), is fsync'ed, renamed over the path, and the directory fsync'ed.
//   A reader sees the old file or the whole new one. A replaced file keeps its
//   permission bits.
// - An existing path that is not a regular file (a character device such as
//   /dev/null, a FIFO, a terminal) is written in place and never replaced.
// - A symbolic link is followed only when root or the caller owns it; a link
//   another user planted is refused, at the path or in any directory above it.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "hangtrace/result.h"

namespace hangtrace {

// Errors read "failed to write PATH: <reason>".
Result<bool> write_file_atomically(const std::string& path, std::string_view content);

// Creates `path`, which must not exist yet (O_EXCL|O_NOFOLLOW), writes
// `content` and fsyncs it: for files inside a directory hangtrace has just
// created for itself (a bundle being assembled).
Result<bool> write_new_file(const std::string& path, std::string_view content, mode_t mode = 0644);

// Refuses a directory path (each of its components) that goes through a
// symbolic link owned by neither root nor the caller; components that do not
// exist yet are fine. Errors read "<component> is a symbolic link owned by ...".
Result<bool> check_directory_links(const std::string& dir);

// fsync of a directory, so a rename into it survives a crash; best effort.
void fsync_directory(const std::string& dir);

}  // namespace hangtrace
