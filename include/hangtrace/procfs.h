// The one /proc layer: parsers for the /proc files hangtrace reads, and
// ProcFs, the reader of every one of them under an injectable root.
//
// Every parse_* function takes the file's TEXT and returns a struct, so the
// formats are unit-tested from fixtures copied off a real machine. Malformed
// or truncated text yields an error, never a crash or a half-filled value
// presented as whole. The readers take an injectable proc root ("/proc"
// unless a test says otherwise) and return the errno text of a failed read,
// so the collector can tell "gone" (ENOENT/ESRCH) from "denied".
//
// Where they live: userspace/core/procfs/ -- process_files.cpp (stat,
// status, syscall, io, schedstat, statm, cmdline, comm, namespace links),
// fd_files.cpp (fd links, fdinfo), maps.cpp, mountinfo.cpp, socket_tables.cpp (net/tcp*,
// udp*, unix), host_addresses.cpp (which addresses are this host: loopback,
// net/if_inet6, net/fib_trie), resolv_conf.cpp (/etc/resolv.conf through
// PID/root), readers.cpp (files, links, listings, identities) and
// proc_fs.cpp (ProcFs).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hangtrace/abi.h"
#include "hangtrace/model.h"
#include "hangtrace/result.h"
#include "hangtrace/text.h"  // tcp_state_name

namespace hangtrace::procfs {

constexpr uint32_t kPfKthread = HT_PF_KTHREAD;  // stat field 9's PF_* bits
constexpr uint32_t kPfExiting = HT_PF_EXITING;

// ---- /proc/PID/stat and /proc/PID/task/TID/stat --------------------------
struct ProcStat {
  int pid = 0;
  std::string comm;  // between the first '(' and the LAST ')'
  char state = '?';
  int ppid = 0;
  int pgrp = 0;
  int session = 0;
  uint32_t flags = 0;  // field 9, PF_*
  uint64_t utime_ticks = 0, stime_ticks = 0;
  int num_threads = 0;
  uint64_t start_time_ticks = 0;  // field 22: tells a reused PID from the original
  // Fields 28, 48, 49: where its stack and its argv are. A new image (exec)
  // moves them; 0 for a zombie, without ptrace access, or on old kernels.
  uint64_t start_stack = 0, arg_start = 0, arg_end = 0;
  std::optional<int> exit_signal;  // field 38: the signal the parent gets on exit
  // Field 52: the wait status for zombies (exit code << 8 | signal), the stop
  // signal for stopped tasks. Absent on old kernels that print fewer fields.
  std::optional<int> exit_code;
  bool is_kernel_thread() const { return (flags & kPfKthread) != 0; }
};
Result<ProcStat> parse_stat(std::string_view text);

// ---- /proc/PID/status ------------------------------------------------------
struct ProcStatus {
  std::string name;
  char state = '?';
  int tgid = 0;
  int pid = 0;
  int ppid = 0;
  int threads = 0;
  uint64_t voluntary_ctxt_switches = 0;
  uint64_t nonvoluntary_ctxt_switches = 0;
  // NSpid: the pid in each pid namespace it is in, the host's (hangtrace's)
  // first, the innermost last; one entry outside containers. At most
  // kMaxPidNamespaceDepth (the kernel's MAX_PID_NS_LEVEL).
  std::vector<int> ns_pids;
  int tracer_pid = 0;  // TracerPid: the ptrace tracer (a debugger, strace), 0 when none
  // SigCgt: the signals with a handler (bit N-1 for signal N); SigBlk: the
  // signals this task blocks now -- inside sigsuspend, the mask it waits with.
  std::optional<uint64_t> signals_caught, signals_blocked;
};
constexpr size_t kMaxPidNamespaceDepth = 32;
// Needs at least Name, Tgid and PPid; the other keys are optional.
Result<ProcStatus> parse_status(std::string_view text);

// ---- /proc/PID/task/TID/syscall ---------------------------------------------
// "running" | "-1 SP PC" (in user mode) | "NR A0 .. A5 SP PC" (hex).
Result<SyscallState> parse_syscall(std::string_view text);

// ---- /proc/PID/fd/N link text -----------------------------------------------
struct FdLinkInfo {
  FdKind kind = FdKind::Unknown;
  uint64_t inode = 0;     // pipe:[N] / socket:[N]; 0 for the rest
  bool deleted = false;   // the path ended in " (deleted)"
  std::string path;       // the path without " (deleted)", paths only
  std::string anon_type;  // "eventfd", "io_uring", ... for anon inodes
};
FdLinkInfo classify_fd_link(std::string_view link);

// ---- /proc/PID/fdinfo/N -----------------------------------------------------
struct FdInfo {
  uint64_t pos = 0;
  uint32_t flags = 0;  // octal in the file
  std::optional<int> mnt_id;
  std::optional<uint64_t> inode;       // "ino:"
  std::optional<uint64_t> eventfd_id;  // "eventfd-id:"
  std::optional<uint64_t> eventfd_count;
  std::optional<int> pidfd_pid;           // "Pid:" of a pidfd (in our pid namespace); -1 once it exited
  std::optional<uint64_t> signalfd_mask;  // "sigmask:" of a signalfd: bit N-1 for signal N
  std::vector<FileLock> locks;            // "lock:" lines, at most kMaxFdLocks
  std::vector<EpollWatch> epoll;          // "tfd:" lines of an epoll fd, at most kMaxEpollWatches
  size_t epoll_watches_left_out = 0;      // past kMaxEpollWatches, or past kMaxFdinfoBytes (then at least 1)
};
// An epoll fd's watch list is as long as its owner makes it (up to
// RLIMIT_NOFILE registrations, ~100 bytes of fdinfo each): the first ones
// are kept, the rest counted. A hang's wait is on a few.
constexpr size_t kMaxEpollWatches = 4096;
constexpr size_t kMaxFdinfoBytes = size_t{1} << 20;
// Needs pos and flags; an epoll "tfd:" line that does not parse is an error.
Result<FdInfo> parse_fdinfo(std::string_view text);

// ---- /proc/locks, fdinfo "lock:" lines (locks.cpp) --------------------------
// A busy host holds thousands of locks; past this many lines the rest are not
// read (a wait's lock is on one file).
constexpr size_t kMaxFileLocks = 100000;
constexpr size_t kMaxLocksBytes = size_t{16} << 20;
// Locks listed in one fd's fdinfo, at most.
constexpr size_t kMaxFdLocks = 64;
Result<FileLock> parse_lock_line(std::string_view line);  // "1: -> FLOCK ADVISORY WRITE 42 fe:00:12 0 EOF"
Result<std::vector<FileLock>> parse_locks(std::string_view text);
// Whether `held` stands in the way of `wanted`: the same file, not both
// read locks, flock with flock, byte ranges overlapping.
bool locks_conflict(const FileLock& held, const FileLock& wanted);

// ---- /proc/PID/maps ---------------------------------------------------------
Result<Mapping> parse_maps_line(std::string_view line);
Result<std::vector<Mapping>> parse_maps(std::string_view text);
// Whether the mapping may run code ('x' in its perms).
inline bool is_executable(const Mapping& m) { return m.perms.size() >= 3 && m.perms[2] == 'x'; }

// ---- /proc/PID/mountinfo (mountinfo.cpp) -----------------------------------
// Lines longer than this are malformed (the kernel's lines are a few hundred
// bytes; overlayfs options run to a few KiB), and at most this many mounts
// are kept: a hostile or huge mount table cannot make hangtrace hold more.
constexpr size_t kMaxMountinfoLineBytes = size_t{64} << 10;
constexpr size_t kMaxMountEntries = 100000;
constexpr size_t kMaxMountinfoBytes = size_t{32} << 20;
// The kernel's octal escapes (\040 space, \011 tab, \012 newline, \134
// backslash) undone; anything else kept as it is.
std::string unescape_mount_field(std::string_view s);
Result<MountEntry> parse_mountinfo_line(std::string_view line);
struct MountTable {
  std::vector<MountEntry> mounts;
  size_t malformed = 0;    // lines that did not parse (skipped)
  bool truncated = false;  // more than kMaxMountEntries mounts
};
MountTable parse_mountinfo(std::string_view text);
// The value of "key=value" in a comma-separated option list ("" when absent).
std::string mount_option(std::string_view options, std::string_view key);
bool is_fuse_fstype(std::string_view fstype);  // fuse, fuseblk, fuse.NAME
// Network filesystems (nfs, cifs, lustre, ceph, ... and FUSE clients of one: sshfs, s3fs).
bool is_network_fstype(std::string_view fstype);
// The FUSE connection of a fuse mount (/sys/fs/fuse/connections/N): its
// anonymous device's minor number; none for other mounts and fuseblk.
std::optional<uint32_t> fuse_connection(const MountEntry& m);
// The server a network filesystem's mount talks to: the host part of its
// source ("host:/export", "//host/share", Lustre "nid@tcp:/fs") and the
// "addr=" option ("host (10.0.0.5)"); "" for local filesystems.
std::string mount_server(const MountEntry& m);

// ---- /proc/net/{tcp,tcp6,udp,udp6} -----------------------------------------
struct InetSocketEntry {
  SocketInfo info;       // family, state, local, remote, queues, inode
  std::string local_ip;  // "127.0.0.1" / "::1" (no brackets)
  std::string remote_ip;
  uint16_t local_port = 0, remote_port = 0;
  int state_code = 0;  // the kernel's TCP_* number
};
// `family` is "tcp", "tcp6", "udp" or "udp6" and picks the address width.
Result<std::vector<InetSocketEntry>> parse_inet_sockets(std::string_view text, const std::string& family);
// 127.0.0.0/8, ::1, ::ffff:127.x.x.x (host_addresses.cpp).
bool is_loopback_address(const std::string& ip);
// "::ffff:10.0.0.1" -> "10.0.0.1"; anything else unchanged.
std::string unmap_ipv4(const std::string& ip);

// The canonical text of an IP address ("::ffff:127.0.0.1" -> "127.0.0.1",
// "0:0::1" -> "::1"); none for anything that is not one address (a name,
// brackets, a port, a zone "%eth0", spaces, an empty string).
std::optional<std::string> canonical_address(std::string_view ip);
// 0.0.0.0, :: (a socket bound to every address, or no remote end).
bool is_unspecified_address(std::string_view ip);
// An endpoint as SocketInfo writes it: "10.0.0.1:53", "[::1]:53".
struct Endpoint {
  std::string ip;  // canonical (canonical_address)
  uint16_t port = 0;
};
std::optional<Endpoint> parse_endpoint(std::string_view text);
// This host: a loopback address, or one of `local_addresses` (the addresses
// of its interfaces), compared in canonical form. Unspecified: never.
bool is_this_host_address(std::string_view ip, const std::vector<std::string>& local_addresses);

// ---- /proc/net/if_inet6, /proc/net/fib_trie: the addresses of this host -----
// if_inet6: "<32 hex digits> ifindex prefix scope flags name" per address.
Result<std::vector<std::string>> parse_if_inet6(std::string_view text);
// fib_trie: the IPv4 addresses of local interfaces, the leaves ("|-- ADDR")
// with a "/32 host LOCAL" route; each once. Lines it does not know are skipped.
std::vector<std::string> parse_fib_trie_local(std::string_view text);
// At most this many addresses are taken from either file.
constexpr size_t kMaxHostAddresses = 4096;

// ---- /etc/resolv.conf (as a process sees it) ----------------------------------
// The nameserver lines (valid addresses only; a link-local zone is dropped)
// and options timeout:N / attempts:N; every other line is ignored.
constexpr size_t kMaxNameservers = 8;
constexpr size_t kMaxResolvConfBytes = size_t{64} << 10;
ResolverConfig parse_resolv_conf(std::string_view text);

// ---- /proc/net/unix ---------------------------------------------------------
struct UnixSocketEntry {
  uint64_t inode = 0;
  uint32_t type = 0;       // SOCK_STREAM=1, SOCK_DGRAM=2, SOCK_SEQPACKET=5
  int socket_state = 0;    // SS_UNCONNECTED=1 .. SS_DISCONNECTING=4
  bool listening = false;  // __SO_ACCEPTCON in Flags
  std::string state;       // "LISTEN", "CONNECTED", "UNCONNECTED", ...
  std::string path;        // "" unnamed, "@name" abstract
};
Result<std::vector<UnixSocketEntry>> parse_unix_sockets(std::string_view text);

// ---- /proc/PID/io, /proc/PID/task/TID/io ------------------------------------
struct ProcIo {
  uint64_t rchar = 0, wchar = 0, syscr = 0, syscw = 0;
  uint64_t read_bytes = 0, write_bytes = 0;
};
// Needs rchar and wchar.
Result<ProcIo> parse_io(std::string_view text);

// ---- /proc/PID/task/TID/schedstat -------------------------------------------
// The first field: nanoseconds spent on a CPU.
Result<uint64_t> parse_schedstat(std::string_view text);
// All three: on a CPU, waiting on a runqueue for one (ns), timeslices run.
struct Schedstat {
  uint64_t run_ns = 0, run_delay_ns = 0, timeslices = 0;
};
Result<Schedstat> parse_schedstat_fields(std::string_view text);

// ---- /proc/PID/cmdline ------------------------------------------------------
// The bounds of what ProcFs reads of a process's command line, environment
// and cgroup list: a process may hold several MiB of arguments and
// environment (ARG_MAX), and a cgroup path is at most PATH_MAX per
// hierarchy. Well above what a job has, well below what would let one
// process make hangtrace hold gigabytes.
constexpr size_t kMaxCmdlineBytes = size_t{1} << 20;
constexpr size_t kMaxEnvironBytes = size_t{4} << 20;
constexpr size_t kMaxCgroupBytes = size_t{64} << 10;
// NUL separators become spaces; the trailing NUL goes.
std::string parse_cmdline(std::string_view text);

// ---- /proc/PID/comm ---------------------------------------------------------
// The name without its newline.
std::string parse_comm(std::string_view text);

// ---- /proc/PID/statm (pages) ------------------------------------------------
struct ProcStatm {
  uint64_t size_pages = 0, resident_pages = 0;
};
// Needs size and resident.
Result<ProcStatm> parse_statm(std::string_view text);

// ---- "net:[4026531840]" (readlink of /proc/PID/ns/net) ----------------------
Result<uint64_t> parse_namespace_link(std::string_view link);

// ---- readers ----------------------------------------------------------------
// Errors read "failed to read PATH: <strerror>"; where errno_out is given it
// receives the errno (0 on success or on a parse error).
//
// Reads a whole (proc) file, at most max_bytes (procfs sizes report 0, so this
// reads until EOF). Longer files are an error rather than silently cut.
Result<std::string> read_text_file(const std::string& path, int* errno_out = nullptr,
                                   size_t max_bytes = size_t{256} << 20);
// Text another user's process controls, kept to a bound: its first
// `max_bytes`, and whether there was more (`cut`), which a caller says
// rather than acting on a part as if it were the whole.
struct BoundedText {
  std::string text;
  bool cut = false;
};
Result<BoundedText> read_text_prefix(const std::string& path, size_t max_bytes, int* errno_out = nullptr);
Result<std::string> read_link(const std::string& path, int* errno_out = nullptr);
// Numeric names in a directory (pids, tids, fds), sorted; bounded by max_entries.
Result<std::vector<int>> list_numeric_dir(const std::string& path, int* errno_out = nullptr,
                                          size_t max_entries = 1u << 22);

// Which file a path names, links followed (an fd's or exe's target).
struct FileId {
  uint32_t dev_major = 0, dev_minor = 0;
  uint64_t inode = 0;
  auto operator<=>(const FileId&) const = default;
};
Result<FileId> stat_file(const std::string& path, int* errno_out = nullptr);
// The file and its size in bytes (stat(2), following links).
struct FileStat {
  FileId id;
  uint64_t size_bytes = 0;
  bool fifo = false;  // a named pipe (S_ISFIFO)
};
Result<FileStat> examine_file(const std::string& path, int* errno_out = nullptr);

// How full the filesystem holding a path is.
struct FsUsage {
  uint64_t size_bytes = 0, used_bytes = 0;
};
Result<FsUsage> filesystem_usage(const std::string& path, int* errno_out = nullptr);

// True for errors meaning the process or thread is gone (ENOENT, ESRCH).
inline bool is_gone_errno(int e) { return e == 2 /*ENOENT*/ || e == 3 /*ESRCH*/; }

class ProcFs {
 public:
  explicit ProcFs(std::string root = "/proc") : root_(std::move(root)) {}
  const std::string& root() const { return root_; }

  // ---- paths, for what is opened rather than read (ELF files, netns fds) ----
  std::string pid_path(int pid) const;            // ROOT/PID
  std::string task_path(int pid, int tid) const;  // ROOT/PID/task/TID
  // ROOT/PID/root/PATH: PATH (absolute) as `pid` sees it, through its mount
  // namespace (a container's libraries and /dev/shm, not ours).
  std::string root_path(int pid, std::string_view path) const;
  std::string namespace_path(int pid, std::string_view ns) const;  // ROOT/PID/ns/NS
  // ROOT/PID/map_files/START-END: opens what is mapped there even when its
  // path does not resolve (another mount namespace, a deleted file).
  std::string map_file_path(int pid, uint64_t start, uint64_t end) const;

  // ---- a process and its threads ----
  Result<ProcStat> stat(int pid, int* err = nullptr) const;
  Result<ProcStat> thread_stat(int pid, int tid, int* err = nullptr) const;
  Result<ProcStatus> status(int pid, int* err = nullptr) const;
  Result<ProcStatm> statm(int pid, int* err = nullptr) const;  // its address space's size, cheaply
  Result<ProcStatus> thread_status(int pid, int tid, int* err = nullptr) const;
  // ROOT/PID/task/TID/syscall (TID == PID: the main thread's).
  Result<SyscallState> thread_syscall(int pid, int tid, int* err = nullptr) const;
  Result<ProcIo> thread_io(int pid, int tid, int* err = nullptr) const;
  Result<uint64_t> thread_schedstat(int pid, int tid, int* err = nullptr) const;
  Result<procfs::Schedstat> thread_schedstat_fields(int pid, int tid, int* err = nullptr) const;
  // What a process's own memory or names control, each read to a bound
  // (kMaxCmdlineBytes, kMaxEnvironBytes, kMaxCgroupBytes); the *_text forms
  // say whether it was cut. A command line is parse_cmdline'd (cmdline()
  // marks a cut one with a trailing " ..."); a cut environment or cgroup
  // text ends at its last whole entry or line.
  Result<BoundedText> cmdline_text(int pid, int* err = nullptr) const;
  Result<std::string> cmdline(int pid, int* err = nullptr) const;
  Result<BoundedText> environ_text(int pid, int* err = nullptr) const;
  Result<std::string> environ(int pid, int* err = nullptr) const;  // raw "K=V\0..." bytes
  Result<std::string> comm(int pid, int* err = nullptr) const;
  Result<BoundedText> cgroup_text(int pid, int* err = nullptr) const;
  Result<std::string> cgroup(int pid, int* err = nullptr) const;  // the raw text
  Result<std::string> limits(int pid, int* err = nullptr) const;  // the raw text
  Result<std::string> exe(int pid, int* err = nullptr) const;     // the link text
  Result<FileId> exe_file(int pid, int* err = nullptr) const;     // the file it names
  Result<uint64_t> namespace_inode(int pid, const std::string& ns, int* err = nullptr) const;
  // The filesystem holding PATH as `pid` sees it (root_path).
  Result<FsUsage> filesystem_usage(int pid, std::string_view path, int* err = nullptr) const;
  Result<std::vector<int>> pids(int* err = nullptr) const;
  Result<std::vector<int>> tids(int pid, int* err = nullptr) const;
  Result<std::vector<Mapping>> maps(int pid, int* err = nullptr) const;
  // ROOT/PID/mountinfo: the mounts of its own mount namespace (at most kMaxMountinfoBytes).
  Result<MountTable> mountinfo(int pid, int* err = nullptr) const;

  // ---- fds ----
  Result<std::vector<int>> fds(int pid, int* err = nullptr) const;
  Result<std::string> fd_link(int pid, int fd, int* err = nullptr) const;  // "pipe:[N]", "/dev/shm/x", ...
  Result<FileId> fd_file(int pid, int fd, int* err = nullptr) const;       // the open file itself
  Result<FileStat> fd_stat(int pid, int fd, int* err = nullptr) const;     // ... and its size
  Result<FdInfo> fdinfo(int pid, int fd, int* err = nullptr) const;

  // ---- sockets, as the network namespace of `pid` shows them ----
  // table: "tcp", "tcp6", "udp", "udp6" read from ROOT/PID/net/TABLE.
  Result<std::vector<InetSocketEntry>> inet_sockets(int pid, const std::string& table,
                                                    int* err = nullptr) const;
  Result<std::vector<UnixSocketEntry>> unix_sockets(int pid, int* err = nullptr) const;
  // ROOT/locks: every file lock of the host (pids as hangtrace's namespace
  // sees them), at most kMaxLocksBytes read and kMaxFileLocks lines kept.
  Result<std::vector<FileLock>> locks(int* err = nullptr) const;
  // The addresses of the interfaces of that namespace: ROOT/PID/net/if_inet6
  // (IPv6) and ROOT/PID/net/fib_trie (IPv4), whichever could be read; an
  // error only when neither could.
  Result<std::vector<std::string>> host_addresses(int pid, int* err = nullptr) const;

  // ---- files of a process's mount namespace ----
  // /etc/resolv.conf as `pid` sees it: opened under ROOT/PID/root with its
  // links resolved inside that root (openat2 RESOLVE_IN_ROOT), a regular
  // file only, at most kMaxResolvConfBytes.
  Result<ResolverConfig> resolv_conf(int pid, int* err = nullptr) const;
  // A regular file at PATH (absolute) as `pid` sees it, opened for reading
  // (the fd is the caller's): its links resolved inside ROOT/PID/root (a
  // link the process planted cannot name one of hangtrace's own files), and
  // anything but a regular file refused without waiting (a FIFO planted
  // where a file was would block an open until a writer came).
  Result<int> open_in_root(int pid, std::string_view path, int* err = nullptr) const;

  // ---- hangtrace itself (ROOT/self, ROOT/thread-self) ----
  Result<std::string> self_exe(int* err = nullptr) const;
  Result<FileId> self_exe_file(int* err = nullptr) const;
  Result<uint64_t> self_rss_bytes(int* err = nullptr) const;  // from statm
  Result<std::string> self_limits(int* err = nullptr) const;  // the raw text
  Result<std::string> self_status(int* err = nullptr) const;  // the raw text
  // ROOT/kallsyms, the kernel's symbols (about 10 MiB; at most 64 MiB read).
  Result<std::string> kallsyms(int* err = nullptr) const;
  // ROOT/sys/kernel/osrelease, trimmed: "6.1.0-18-amd64".
  Result<std::string> kernel_release(int* err = nullptr) const;
  // The calling thread's namespace (hangtrace's own view of the network).
  Result<uint64_t> thread_self_namespace_inode(const std::string& ns, int* err = nullptr) const;

 private:
  std::string self_path() const;
  std::string root_;
};

}  // namespace hangtrace::procfs
