// A bearer token kept in a file: the daemon's bundle server checks requests
// against it (daemon_http.cpp), `hangtrace merge` sends it to daemons.
#pragma once

#include <string>

#include "hangtrace/result.h"

namespace hangtrace::cli {

// The token in `path` (its first line, surrounding blanks trimmed): a file
// only its owner can read, never through a link, of at least 16 characters;
// or "failed to read the token file PATH: why".
Result<std::string> read_token_file(const std::string& path);

}  // namespace hangtrace::cli
