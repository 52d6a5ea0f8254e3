// The snapshot: raw facts about a process tree at one instant.
//
// The collector (userspace/collect, needs root, /proc, BPF) fills it; the core
// (graph, rules, report) reads it and nothing else, so every rule can be
// unit-tested from a fixture. A snapshot round-trips through JSON
// (snapshot_json.h), which is also how fixtures are written.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hangtrace/kernel_log.h"

namespace hangtrace {

enum class FdKind {
  Unknown,
  Pipe,       // "pipe:[INODE]"
  Socket,     // "socket:[INODE]"
  EventFd,    // "anon_inode:[eventfd]"
  Epoll,      // "anon_inode:[eventpoll]"
  TimerFd,    // "anon_inode:[timerfd]"
  SignalFd,   // "anon_inode:[signalfd]"
  PidFd,      // "anon_inode:[pidfd]"
  OtherAnon,  // other anon_inode:[...]
  File,       // a path on a regular file system
  ShmFile,    // a path under the target's /dev/shm
  Device,     // /dev/...
};

struct EpollWatch {
  int target_fd = -1;   // "tfd:" in fdinfo
  uint32_t events = 0;  // EPOLL* mask
  uint64_t inode = 0;   // "ino:" (hex in fdinfo)
};

// One line of /proc/locks, or a "lock:" line of /proc/PID/fdinfo/FD (the
// locks held through that open file): a lock held, or with `waiting` (the
// "->" lines) a request blocked behind the lock listed above it.
struct FileLock {
  int64_t id = 0;    // the line's number: a held lock and its waiters share it
  std::string type;  // "FLOCK", "POSIX", "OFDLCK", "LEASE", "DELEG"
  std::string mode;  // "READ", "WRITE" (leases: "BREAKING", ... as printed)
  int pid = 0;  // the process as hangtrace's pid namespace shows it; -1 (OFD: no owner process), 0 unseen
  uint32_t dev_major = 0, dev_minor = 0;
  uint64_t inode = 0;
  uint64_t start = 0;
  std::optional<uint64_t> end;  // unset: to the end of the file ("EOF")
  bool waiting = false;
};

struct FdEntry {
  int fd = -1;
  std::string link;  // readlink(/proc/PID/fd/N)
  FdKind kind = FdKind::Unknown;
  uint64_t inode = 0;  // pipe/socket inode, or the file's inode from fdinfo
  uint32_t flags = 0;  // "flags:" from fdinfo (octal there), O_ACCMODE etc.
  uint64_t pos = 0;
  std::optional<uint64_t> eventfd_id;  // "eventfd-id:" (6.x kernels)
  // A pidfd's process (fdinfo "Pid:", host pid namespace; -1 once it exited).
  std::optional<int> pidfd_pid;
  std::optional<uint64_t> signal_mask;  // a signalfd's signals (fdinfo "sigmask:"), bit N-1 for signal N
  std::vector<EpollWatch> epoll;        // for FdKind::Epoll
  // Readiness probed on a duplicate of the fd (pidfd_getfd + poll(0)):
  // POLLIN/POLLOUT/POLLHUP bits, or -1 when not probed.
  int32_t ready_events = -1;
  int64_t queued_bytes = -1;  // FIONREAD on pipes/sockets, -1 unknown
  int mnt_id = -1;            // "mnt_id:" from fdinfo: the mount (MountEntry::mount_id) it is on
  // Files: the device it is on (st_dev), for matching /proc/locks; 0:0 unknown.
  uint32_t dev_major = 0, dev_minor = 0;
  std::vector<FileLock> locks;  // "lock:" lines of its fdinfo: the locks held through it
};

// One line of /proc/PID/mountinfo (the process's own mount namespace), the
// escapes (\040 for a space) undone.
struct MountEntry {
  int mount_id = 0, parent_id = 0;
  uint32_t dev_major = 0, dev_minor = 0;  // st_dev of its files; FUSE: minor = connection number
  std::string root;                       // the part of the filesystem mounted here
  std::string mount_point;
  std::string mount_options;  // per mount: "rw,nosuid,relatime"
  std::string fstype;         // "ext4", "nfs4", "fuse.datasetfs"
  std::string source;         // "/dev/sda1", "server:/export", "datasetfs"
  std::string super_options;  // per superblock: "rw,vers=4.2,addr=10.0.0.5"
};

struct Mapping {
  uint64_t start = 0, end = 0, offset = 0;
  std::string perms;  // "rw-s"
  uint32_t dev_major = 0, dev_minor = 0;
  uint64_t inode = 0;
  std::string path;  // may end in " (deleted)"
  bool shared() const { return perms.size() >= 4 && perms[3] == 's'; }
};

// What /proc/PID/task/TID/syscall says (or the BPF pt_regs copy of it).
struct SyscallState {
  enum class Mode { Unknown, Running, InSyscall, User } mode = Mode::Unknown;
  int64_t nr = -1;
  uint64_t args[6] = {0, 0, 0, 0, 0, 0};
  uint64_t sp = 0, pc = 0;
};

// Memory of the target read with process_vm_readv for the syscall it is in.
// The collector decides what to read from the decoded syscall; the core
// interprets it. Every field is optional: a read can fail (the target moved).
struct WaitMemory {
  // futex: the 32-bit word at uaddr, and 32 bytes from uaddr (enough for a
  // pthread_mutex_t's __lock/__count/__owner/__nusers/__kind, or a sem_t).
  std::optional<uint32_t> futex_word;
  std::vector<uint8_t> futex_bytes;
  // poll/ppoll: the pollfd array {fd, events}; select/pselect: fds in the sets.
  std::vector<std::pair<int, uint32_t>> poll_fds;
  // Timeout the syscall was given, in seconds (relative), when it has one.
  std::optional<double> timeout_s;
  bool timeout_absolute = false;  // FUTEX_WAIT_BITSET / clock_nanosleep ABS
};

// The fds the syscall waits on directly: args[0] of read/write/accept/
// connect/epoll_wait/flock, the poll/select fds. (Fds watched by an epoll fd
// are added by the caller, which knows the epoll's fdinfo.)
std::vector<int> directly_waited_fds(const SyscallState& syscall, const WaitMemory& memory);

struct KernelFrame {
  uint64_t addr = 0;
  std::string symbol;  // "futex_wait_queue+0x5f" (kallsyms), empty if unknown
};

// From the BPF task iterator (include/hangtrace/abi.h ht_task_record).
struct KernelTaskView {
  uint32_t state = 0;       // task->__state
  uint32_t task_flags = 0;  // PF_*
  bool on_cpu = false;
  uint64_t off_cpu_ns = 0;  // how long since it last ran (scheduler clock)
  uint64_t sum_exec_ns = 0;
  uint64_t nvcsw = 0, nivcsw = 0;
  uint64_t user_ip = 0, user_sp = 0, user_bp = 0;
  // The whole saved user register set, for unwinding without frame
  // pointers: DWARF numbering (x86_64: 0..16 = rax rdx rcx rbx rsi rdi rbp rsp
  // r8..r15 rip; arm64: 0..30 = x0..x30, 31 = sp, 32 = pc). Only the first
  // user_nregs entries mean anything, and only when has_user_regs. Not
  // persisted in snapshots: only the live unwinder needs them.
  bool has_user_regs = false;
  uint16_t user_machine = 0;  // ELF e_machine the registers belong to (EM_X86_64 = 62)
  uint16_t user_nregs = 0;
  std::array<uint64_t, 33> user_regs{};
  std::vector<KernelFrame> stack;
  int32_t stack_error = 0;  // -errno from bpf_get_task_stack, 0 if fine
};

// One frame of a thread's user-space stack, innermost first: Python frames read
// from the interpreter's memory, native frames unwound and symbolized.
struct UserFrame {
  enum class Kind : uint8_t { Native, Python };
  Kind kind = Kind::Native;
  std::string function;  // "DataLoader._try_get_data", "pthread_mutex_lock"
  std::string file;      // source file (Python) or module path (native)
  int line = 0;          // Python: the line being executed; 0 when unknown
  uint64_t addr = 0;     // native: instruction address; 0 for Python frames
  // Native: the address relative to the module's load base (what addr2line
  // and a symbol server take) and the module's GNU build-id (hex, "" when the
  // ELF has none): enough to symbolize the frame again offline.
  uint64_t module_offset = 0;
  std::string build_id;
  // Python: this frame was entered by a C-level call of the interpreter's
  // eval loop (_PyEval_EvalFrameDefault), not inlined into its caller's:
  // true for every frame before 3.11, for 3.11+ the frames that start a run
  // of Python-to-Python calls. Merging native and Python stacks puts the run
  // of Python frames up to and including an entry frame in place of one
  // native eval-loop frame.
  bool python_entry = false;
  // Python: the integer argument read from the frame's locals where the
  // function is one whose argument says who the process is
  // (identity_argument_position in collectives.h: torch.multiprocessing.spawn's
  // child index); unset for every other frame, or when it did not read back
  // as a non-negative int.
  std::optional<int64_t> argument;
};

// A Python-level lock a thread sleeps on. From 3.13 threading.Lock, RLock
// and the free-threaded build's per-object locks (critical sections) are
// PyMutexes: a contended locker parks on a semaphore on its own stack, so its
// futex names no lock; the interpreter's wait entry beside it does.
struct PythonLockWait {
  uint64_t mutex = 0;       // the PyMutex's address
  std::string kind;         // "threading.Lock", "threading.RLock", "critical section", "PyMutex"
  uint64_t object = 0;      // the lock object, or the object a critical section locks (0: unknown)
  std::string object_type;  // tp_name of `object` ("_thread.lock", "dict")
  int owner_tid = 0;        // the holder where the lock records it (RLock), else 0
};

// A thread found asleep on a timer at both progress samples, then watched a
// little longer (collector_polls.cpp): a loop that sleeps and re-checks -- a
// poll -- wakes again and again and does almost nothing in between.
struct PollWatch {
  double watched_s = 0;         // how long it was watched
  uint64_t sleeps = 0;          // voluntary context switches in that time
  uint64_t cpu_ns = 0;          // CPU it used in that time
  int samples = 0, asleep = 0;  // samples taken, and those that found it in a sleep call
  // Its process's fds on files that another process holds a lock on, and
  // it does not: what a lock-polling loop (LOCK_NB, F_SETLK and retry) is
  // after. Empty for a loop whose file it closes between tries.
  std::vector<int> lock_fds;
};

struct ThreadInfo {
  int tid = 0;
  std::string comm;
  char state = '?';  // /proc stat state: R S D T t Z X I
  SyscallState syscall;
  std::optional<KernelTaskView> kernel;  // absent when BPF was unavailable
  WaitMemory memory;
  // The ptrace tracer of this thread (/proc status TracerPid) and its comm;
  // 0 when none: a debugger or strace attached, and in a ptrace stop (t).
  int tracer_pid = 0;
  std::string tracer_comm;
  // Its id in its process's innermost pid namespace (/proc status NSpid's
  // last): what a lock word inside a container records as owner. 0 when
  // not in a container, or unknown.
  int ns_tid = 0;
  uint64_t voluntary_switches = 0;  // /proc status voluntary_ctxt_switches
  uint64_t involuntary_switches = 0;
  // Progress counters sampled twice (start and end of the snapshot):
  // CPU ns and I/O bytes; used to tell a stuck timed-wait loop from a live one.
  uint64_t cpu_ns_start = 0, cpu_ns_end = 0;
  uint64_t io_bytes_start = 0, io_bytes_end = 0;
  bool progress_sampled = false;
  // How many times the thread was put on a CPU (/proc schedstat's third
  // field), read before its state and syscall, and again with the last
  // progress sample: a thread read in a wait that then ran was released
  // (or interrupted) meanwhile, whatever that one reading said. Absent
  // when schedstat could not be read.
  std::optional<uint64_t> runs_at_read;
  uint64_t runs_end = 0;
  std::optional<PollWatch> poll;  // set for a main thread asleep on a timer at both samples
  // Empty when not read (not a Python process, or the read failed: see
  // python_stack_error).
  std::vector<UserFrame> python_stack;
  std::string python_stack_error;
  bool holds_gil = false;
  std::optional<PythonLockWait> python_lock;
  // 3.11+: the asyncio event loop this thread is running and the task the
  // loop is running now (addresses; 0: none).
  uint64_t asyncio_loop = 0, asyncio_running_task = 0;
  // Innermost first, unwound from the registers the BPF snapshot saved
  // (threads blocked off CPU only). Empty when not unwound: see
  // native_stack_error ("" when none was attempted or it worked).
  std::vector<UserFrame> native_stack;
  std::string native_stack_error;
};

// The task iterator reads each thread a moment after /proc did, and saves the
// registers of the syscall the thread is in (nr -1: none). Those stand for
// /proc's reading when /proc said nothing (unreadable), and when /proc saw the
// thread running (R, no syscall) and the iterator found it asleep in a
// syscall: it has begun a wait since, and its kernel and native stacks are of
// that instant (a GIL waiter between two of take_gil's 5 ms waits reads R in
// /proc and is back in the futex by then; its state becomes S or D). Returns
// whether they were taken.
bool adopt_iterator_syscall(ThreadInfo& t, const KernelTaskView& view, int64_t iterator_syscall_nr,
                            const uint64_t (&iterator_syscall_args)[6]);

// One asyncio task of a CPython 3.11+ process, read from outside (3.14+
// through the _asyncio module's debug offsets, 3.11-3.13 from the asyncio
// module's task registries): what `python -m asyncio ps` lists.
struct AsyncioTask {
  uint64_t address = 0;
  std::string name;  // "Task-3", or the name it was given
  int tid = 0;       // the thread whose task list holds it (0: the interpreter's, its thread gone)
  // Its suspended coroutine chain, innermost first (empty while it runs:
  // its frames are then on the thread's own stack).
  std::vector<UserFrame> coroutine_stack;
  // The object its innermost coroutine awaits (0: none, or it runs), that
  // object's type, and whether it is a task of this list.
  uint64_t awaits = 0;
  std::string awaits_type;
  // The awaited object's reference count (-1: not read), and how many of
  // those references the awaiting task holds itself: its fut_waiter, the
  // coroutine's future iterator, and the slots of its coroutines' frames
  // (locals, value stack) that name it. Equal: nothing else can ever set it.
  int64_t awaits_refcount = -1;
  int64_t awaits_own_refs = -1;
  std::vector<uint64_t> awaited_by;  // the tasks (and futures) awaiting it
  std::string error;                 // why some of it could not be read
};

enum class ProcessRole { Target, Descendant, Peer };

// The name resolver a process is set up with: the nameserver lines of
// /etc/resolv.conf as the process sees it (through its mount namespace), and
// the options that bound how long one lookup waits. Nothing else of the file
// (search domains) is kept.
struct ResolverConfig {
  std::vector<std::string> nameservers;    // addresses in file order, at most procfs::kMaxNameservers
  std::optional<int> timeout_s, attempts;  // "options timeout:N attempts:N"; unset: glibc's 5 s and 2
  std::string error;                       // why the file could not be read ("" when it was)
};

struct ProcessInfo {
  int pid = 0;
  int ppid = 0;
  std::string comm;
  std::string cmdline;  // NUL separators replaced by spaces
  std::string exe;
  char state = '?';
  uint32_t flags = 0;  // PF_* from /proc stat field 9
  ProcessRole role = ProcessRole::Target;
  bool is_python = false;
  // "CPython 3.14.7", "CPython 3.14.7 (free-threaded)"; empty when the
  // interpreter's state was not read.
  std::string python_interpreter;
  std::vector<AsyncioTask> asyncio_tasks;  // 3.11+, bounded (kMaxAsyncioTasks)
  std::string asyncio_error;               // why the tasks could not be read ("" when read or none)
  // Where the interpreter keeps each GIL (the address of its struct
  // _gil_runtime_state: _PyRuntime.ceval.gil before 3.12, what each
  // interpreter's ceval.gil points at from 3.12), one per GIL; empty when the
  // interpreter's state was not read. A futex wait inside one is a GIL wait.
  std::vector<uint64_t> python_gils;
  uint64_t netns = 0, mntns = 0;  // namespace inodes
  std::vector<ThreadInfo> threads;
  std::vector<FdEntry> fds;
  std::vector<Mapping> maps;  // only shared and futex-relevant mappings
  // The mounts of the files its threads wait on in the kernel (fds' mnt_id),
  // from its own /proc/PID/mountinfo; not every mount it sees.
  std::vector<MountEntry> mounts;
  std::vector<int> children;       // pids whose ppid is this one (incl. zombies)
  std::optional<int> exit_signal;  // for zombies: from /proc stat exit_code
  // torch.distributed identity from the process's initial environment
  // (RANK, WORLD_SIZE, LOCAL_RANK as torchrun sets them); unset when absent.
  std::optional<int> rank, world_size, local_rank;
  std::string rank_source;  // the variable the rank came from (RankIdentity::source)
  // Seconds since it started (its stat start time against CLOCK_BOOTTIME);
  // unset when unknown (read through another /proc root).
  std::optional<double> age_s;
  // The job it is a rank of, named the same on every host (job_identity.h:
  // TORCHELASTIC_RUN_ID, or a hash of the rendezvous); "" when none.
  std::string job_id, job_id_source;
  // The pid in each pid namespace, the host's first and the container's last
  // (/proc/PID/status NSpid); empty when unknown, one entry outside containers.
  std::vector<int> ns_pids;
  // /proc/PID/status SigCgt (the signals it has a handler for) and SigBlk
  // (those its main thread blocks now; inside sigsuspend, the mask it waits
  // with): bit N-1 for signal N; unset when not read.
  std::optional<uint64_t> signals_caught, main_signals_blocked;
  // Whether a child's exit ends its main thread's pause or sigsuspend: it
  // catches SIGCHLD and does not block it. False when unknown.
  bool woken_by_child_exit() const;
  // The container and pod it runs in, from its cgroup path ("" when none).
  std::string container_runtime, container_id, pod_uid;
  // The cgroup whose freezer holds it frozen ("freezer:/path" for v1's
  // FROZEN/FREEZING, "/path" for v2's "frozen 1"); "" when it is not frozen.
  // Frozen threads show state D (v1) or S (v2), yet run nothing until thawed.
  std::string frozen_cgroup;
  // Its memory cgroup: v1's memory controller path, else the v2 path ("/job");
  // "" when unknown. What an OOM kill in the kernel log names (task_memcg).
  std::string memory_cgroup;
  // Its resolv.conf (the job's processes only; unset when not read).
  std::optional<ResolverConfig> resolver;
  const ThreadInfo* thread(int tid) const;  // nullptr if not one of its threads
};

// A socket as the kernel's tables show it, keyed by inode.
struct SocketInfo {
  uint64_t inode = 0;
  uint64_t netns = 0;
  std::string family;  // "unix", "tcp", "tcp6", "udp", "udp6"
  std::string state;   // "ESTABLISHED", "LISTEN", ... (unix: "CONNECTED")
  std::string local;   // "127.0.0.1:5000" / "[::1]:5000" / unix path or "@abstract"
  std::string remote;
  uint64_t rx_queue = 0, tx_queue = 0;
  uint64_t peer_inode = 0;  // unix: from sock_diag; tcp: matched reverse tuple
  bool remote_is_local_host = false;
  // unix: a connection not accepted yet -- its other end waits in the accept
  // queue of this listening socket (sock_diag UNIX_DIAG_ICONS); 0 otherwise.
  uint64_t pending_on_listener = 0;
};

struct ShmSegment {
  std::string name;              // file name under /dev/shm
  uint64_t size_bytes = 0;       // st_size
  uint64_t allocated_bytes = 0;  // st_blocks * 512
  std::vector<int> mapped_by;    // pids mapping or holding it open
};

struct ShmInfo {
  bool available = false;
  std::string mount_path;   // as seen through /proc/PID/root
  uint64_t size_bytes = 0;  // statvfs f_blocks * f_frsize
  uint64_t used_bytes = 0;
  std::vector<ShmSegment> largest;  // by allocated bytes, up to 10
  // Deleted-but-mapped segments (torch shares tensors this way) count in
  // used_bytes yet have no name; they are listed from the maps.
  uint64_t unlinked_mapped_bytes = 0;
};

struct Snapshot {
  int schema = 1;
  std::string hangtrace_version;
  std::string hostname;
  std::string kernel_release;
  double taken_at_unix = 0;    // wall clock, seconds
  double sample_window_s = 0;  // time between progress samples
  // When the blocked times (KernelTaskView::off_cpu_ns) were read, on both
  // clocks: places "blocked for X s" on the wall clock, and live events
  // (CLOCK_MONOTONIC) on the same axis as the snapshot. 0 when unknown (older
  // snapshot files); readers then fall back to taken_at_unix.
  double sampled_at_unix = 0;
  uint64_t sampled_at_monotonic_ns = 0;
  int target_pid = 0;  // the job's root: the tree below it is the job
  // The pids the user named that belong to this job (a worker, a rank, the
  // root...), and what the walk up to the root stopped at ("bash 812 (a
  // shell)"); empty when the job was launched or found by hangtrace.
  std::vector<int> given_pids;
  std::string root_parent;
  std::vector<ProcessInfo> processes;
  std::vector<SocketInfo> sockets;
  ShmInfo shm;
  // Host addresses (for "is the remote end on this host").
  std::vector<std::string> local_addresses;
  // The lines of /proc/locks on the files a thread of the job waits to lock
  // (flock, fcntl F_SETLKW): the locks held on them and the requests queued.
  std::vector<FileLock> file_locks;
  // What the collector could not see, one line each ("no BPF: ...").
  std::vector<std::string> limitations;
  // The kernel log's deaths and stalls (/dev/kmsg, read at the snapshot),
  // oldest first, and CLOCK_MONOTONIC when it was read: how long ago each
  // was (its ts_us is on the kernel's clock since boot). 0: not read.
  std::vector<KernelLogEvent> kernel_events;
  double kernel_log_read_at_s = 0;

  const ProcessInfo* process(int pid) const;
  const SocketInfo* socket(uint64_t inode) const;
};

}  // namespace hangtrace
