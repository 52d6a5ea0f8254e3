// From a Snapshot to a verdict: what each thread waits on, who could release
// it, which waits can never end, and why.
//
// The wait-for graph is bipartite: a thread "waits on" objects (a futex, a
// pipe, a socket, a child) and an object "can be released by" threads (the
// lock owner, the holders of a pipe's other end, the peer of a socket). A
// thread waiting on several objects (poll, epoll) is released by any of them
// (the OR model), so a set of threads is deadlocked when none of them can
// reach a thread that is running, sleeping on a timer, waiting on the network
// or otherwise able to move on by itself (a knot), not merely when a cycle
// exists.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hangtrace/finding_kinds.h"
#include "hangtrace/live.h"
#include "hangtrace/model.h"
#include "hangtrace/profile.h"
#include "hangtrace/syscalls.h"

namespace hangtrace {

enum class ObjectKind {
  Futex,
  Pipe,
  UnixSocket,
  TcpSocket,
  UdpSocket,
  Socket,
  EventFd,
  File,
  Child,
  Gil,       // the GIL of one Python process (its interpreter), released by its holder
  FileLock,  // a flock/POSIX/OFD lock on a file (/proc/locks), released by the processes holding it
  Signal,    // a signal (pause, sigwait, a signalfd): its sender is not known until it is sent
  Unknown
};
const char* object_kind_name(ObjectKind k);

// Where a futex lives, as the kernel's futex hash keys it: a private futex by
// its process and address, one in a shared mapping by the object behind the
// mapping and the offset in it (so waits of several processes on one lock
// meet in one object).
struct FutexLocation {
  uint64_t address = 0;  // the waiter's uaddr (its first waiter's, for a shared one)
  bool shared = false;
  int pid = 0;      // the process of its first waiter: for a private futex, the one whose memory holds it
  Mapping mapping;  // shared: the first waiter's mapping of the backing object
  uint64_t file_offset = 0;  // shared: the lock's offset in that object
};

// A wait inside a filesystem (a read or write of a file stuck in the kernel):
// the file, the mount it is on as the waiter's mount namespace shows it, and
// who serves it -- the server of a network filesystem, the daemon of a FUSE
// mount (that daemon's threads are then the object's releasers).
struct FileSystemWait {
  std::string file;  // the path of the fd read or written, "" when unknown
  bool write = false;
  bool known_mount = false;  // the fields below come from the waiter's mountinfo
  std::string mount_point, fstype, source;
  std::string options;                      // the superblock's ("rw,vers=4.2,hard,addr=10.0.0.5")
  std::string server;                       // network filesystems: "host (10.0.0.5)", "" otherwise
  std::optional<uint32_t> fuse_connection;  // /sys/fs/fuse/connections/N
  std::vector<int> server_pids;             // FUSE: the processes holding /dev/fuse that serve it
};

// Every live thread of `pid` but `except` can end the wait: a lock anyone
// sharing its memory may post (a semaphore, a condition, a plain futex), a
// pipe or socket the process holds. One entry, not a list of tids: n threads
// parked on their own private futexes would be n * n releaser ids.
struct ReleaserProcess {
  int pid = 0;
  std::vector<int> except;  // the object's waiters among pid's live threads, ascending
  size_t threads = 0;       // how many threads the entry stands for (live ones minus except)
};

struct WaitObject {
  std::string id;  // stable key: "pipe:[123]:r", "futex:shared:0:5:1234:0x40", "child:77", "gil:212"
  ObjectKind kind = ObjectKind::Unknown;
  // What the object is, for the rules (which never take `id` apart).
  std::string name;  // what people grep for: "pipe:[123]" (either end), "socket:[5]", "child:77"
  std::optional<FutexLocation> futex;  // set for kind Futex
  std::optional<FileSystemWait> fs;    // set for a wait inside a filesystem (kind File)
  std::string label;  // for people: "pipe:[123] (read end)", "semaphore /dev/shm/sem.mp-ab12 (deleted)+0x0"
  std::vector<int> waiters;  // tids waiting on it
  // Who could end the wait (never a waiter of it): threads named one by one
  // (a lock's owner, the GIL's holder), ascending, and whole processes.
  // releasers.cpp walks both; see releaser_count, releasers_of, ReleaserWalk.
  std::vector<int> releasers;
  std::vector<ReleaserProcess> releaser_processes;  // ascending pid, none also in `releasers`
  std::vector<int> holder_pids;                     // processes holding the other end / mapping the lock
  bool ready = false;                               // the kernel says the wait is already satisfied
  bool external = false;                            // released by something outside this host or snapshot
  // Input a person types (a terminal, stdin read by a debugger): external,
  // and whoever holds the other end (the launcher that gave a rank its
  // stdin pipe) releases nothing.
  bool released_by_person = false;
  bool releasers_certain = false;  // releasers known exactly (a lock's owner, a peer socket)
  bool only_self_holders = false;  // other end held only by the waiters' own process
  std::optional<int> owner_tid;    // a lock's owner, when the lock word records it
  // The lock word's owner is a TID of a pid namespace (a container's) that
  // no thread sharing the lock has: owner_tid is then that TID as recorded.
  bool owner_unresolved = false;
  std::vector<std::string> notes;  // evidence about the object ("owner TID 77 is dead")
  // Socket endpoints, and whether the remote one is this host (a loopback
  // address or one of its interfaces).
  std::string local, remote;
  bool remote_on_this_host = false;
  bool listening = false;    // a listening TCP socket: whoever waits on it serves clients
  uint64_t peer_socket = 0;  // the other end's inode, when this host holds it
};

enum class Activity {
  Running,    // on CPU or runnable
  Blocked,    // waiting with no timeout
  TimedWait,  // waiting with a timeout (may be a retry loop)
  Sleeping,   // a plain timed sleep: wakes by itself
  DiskWait,   // uninterruptible (D): usually I/O in progress
  Stopped,    // SIGSTOP / ptrace stop
  Dead,       // zombie or exiting
  Unknown,
};
const char* activity_name(Activity a);

struct ThreadWait {
  int tid = 0;
  int pid = 0;
  Activity activity = Activity::Unknown;
  WaitClass wait_class = WaitClass::None;
  std::string syscall_text;          // "futex(0x7f.., FUTEX_WAIT_BITSET|FUTEX_PRIVATE_FLAG, 0, NULL)"
  std::string summary;               // "waits on lock 0x7f..40 (private, no owner)"
  std::vector<std::string> objects;  // WaitObject ids (OR)
  std::optional<double> timeout_s;
  std::optional<double> blocked_s;  // from the kernel's scheduler bookkeeping
  bool progressed = false;          // CPU or I/O moved between the two samples
  // Put on a CPU after its wait was read: the wait read was not the one it
  // sits in for good (ThreadInfo::runs_at_read).
  bool woke = false;
  // The fd of what only a person ends: a terminal it reads, or stdin read
  // inside an interactive debugger or console (interactive_console).
  std::optional<int> input_fd;
  bool input_terminal = false;            // that fd is a terminal
  std::vector<std::string> kernel_stack;  // function names, innermost first
  // A poll: a thread that sleeps, wakes, re-checks and sleeps again (see
  // is_poll): how often it wakes, and how long it was watched. Its objects
  // are the locked files it may poll for.
  std::optional<double> poll_period_s;
  double poll_watched_s = 0;
};

// A watched thread polls: it woke at least 3 times, was found asleep in at
// least 80 % of the samples and used under 5 % of a CPU.
bool is_poll(const PollWatch& w);

struct WaitGraph {
  std::map<std::string, WaitObject> objects;
  std::map<int, ThreadWait> threads;  // by tid
  std::map<int, int> tid_to_pid;
  std::map<int, std::vector<int>> live_threads;  // pid -> its live threads, ascending (live processes)

  // The threads `tid` depends on: the releasers of everything it waits on
  // (itself excepted), sorted.
  std::vector<int> depends_on(int tid) const;
};

// ---- releasers (graph/releasers.cpp) --------------------------------------------
// How many threads could end the wait on `o`.
size_t releaser_count(const WaitObject& o);
bool is_releaser(const WaitGraph& g, const WaitObject& o, int tid);
// The lowest tid that could end the wait on `o`.
std::optional<int> first_releaser(const WaitGraph& g, const WaitObject& o);
// Every releaser of `o`, ascending: as many as releaser_count says.
std::vector<int> releasers_of(const WaitGraph& g, const WaitObject& o);

// The releasers of a set of objects, ascending and each once, one at a time
// (never all at once: the dependencies of a process's parked threads on each
// other are n * n).
class ReleaserCursor {
 public:
  ReleaserCursor(const WaitGraph& g, const std::vector<const WaitObject*>& objects, int skip_tid = 0);
  // The releasers of every object `tid` waits on, `tid` itself skipped.
  ReleaserCursor(const WaitGraph& g, int tid);
  std::optional<int> next();

 private:
  struct Range {
    const int *at = nullptr, *end = nullptr;
    const int *except = nullptr, *except_end = nullptr;  // ascending tids to step over
  };
  void add(const WaitGraph& g, const WaitObject& o);
  std::vector<Range> ranges_;
  int skip_ = 0;
};

// A breadth-first walk over releasers, each thread reached once: every
// object expanded costs what it newly reaches plus its own waiters, not the
// size of the processes that can release it.
class ReleaserWalk {
 public:
  using TidFilter = std::function<bool(int)>;
  // Only threads for which `member` is true are reached (all when empty).
  explicit ReleaserWalk(const WaitGraph& g, TidFilter member = {});
  bool reached(int tid) const { return reached_.count(tid) > 0; }
  void mark(int tid);
  // The releasers of `o` not reached before, ascending, now marked reached;
  // with `pid_filter`, only those of processes it accepts.
  std::vector<int> expand(const WaitObject& o, const TidFilter& pid_filter = {});

 private:
  std::set<int>& unreached_of(int pid);
  const WaitGraph& g_;
  TidFilter member_;
  std::set<int> reached_;
  std::map<int, std::set<int>> unreached_;  // pid -> its live member threads not reached
  std::set<const void*> done_;              // releaser lists and entries fully expanded
};

WaitGraph build_wait_graph(const Snapshot& snapshot);

// A process's place in the job, as the reports name it: "main" (the target),
// or "launcher" when the target runs ranks; "rank N"; "worker" (a child of
// the main process or of a rank), "descendant", "peer"; "process" for none.
std::string job_role_label(const Snapshot& snapshot, const ProcessInfo* process);
// The same, saying what kind of child a "worker" or "descendant" is, for
// findings and the process table: "DataLoader worker" (it runs torch's
// worker loop), "multiprocessing child" (multiprocessing started it: its
// bootstrap frames, or spawn/forkserver in its command line), "subprocess"
// (it exec'd another program), else the coarse label. Metrics and profiles
// keep the coarse one.
std::string job_role_text(const Snapshot& snapshot, const ProcessInfo* process);

struct ChainStep {
  std::string from;
  // "waits on" (thread -> object), "can be released by" (object -> thread),
  // "note" (object -> what is known of it), "waits:" (thread -> the summary
  // of a wait on no known object); GPU and collective chains also "waits in",
  // "waits for", "is idle, fed by", "needs", "is instead".
  std::string edge;
  std::string to;
};

enum class Confidence { Probable, Certain };
const char* confidence_name(Confidence c);

struct Finding {
  // A finding of `kind` with the kind's default severity and priority.
  explicit Finding(FindingKind k)
      : kind(k), severity(finding_kind_info(k).severity), priority(finding_kind_info(k).priority) {}

  std::string id;    // "F1"
  FindingKind kind;  // finding_kind_name(kind) is the reports' "kind"
  Severity severity;
  Confidence confidence = Confidence::Probable;
  std::vector<int> pids, tids;
  std::string summary;
  std::vector<ChainStep> chain;  // from the target's main thread (gpu-starved: the GPU) to the cause
  std::vector<std::string> evidence;
  std::vector<std::string> advice;
  nlohmann::json details = nlohmann::json::object();
  // The id of the finding at the root of the chain of causes that explains
  // this one: its threads wait, through others, on that one's ("" for a root).
  std::string caused_by;
  // Threads this finding's threads wait for outside the wait-for graph (a
  // collective's absent ranks), for grouping by cause (not exported).
  std::vector<int> waits_for_tids;
  int priority = 0;  // ordering key among one severity and confidence, lower first (not exported)
  // Threads along `chain`, the target's main thread first (not exported):
  // with `tids`, the set of threads whose waits make up this finding.
  std::vector<int> chain_tids;
};

struct AnalysisOptions {
  double stall_after_s = 10.0;  // a socket wait this long counts as stalled
  double shm_full_ratio = 0.90;
  uint64_t progress_cpu_ns = 2'000'000;             // more CPU than this between samples = progress
  uint64_t memory_growth_min_bytes = 256ull << 20;  // RSS growth in the window worth a finding
  double memory_growth_min_ratio = 0.25;            // ... and this much of where it started
  double gpu_wait_after_s = 5.0;      // a host thread in a CUDA synchronize this long is a finding
  double gpu_wait_critical_s = 60.0;  // ... and a critical one from here
  unsigned gpu_idle_util_pct = 5;     // NVML utilization at or under this is an idle GPU
  double gpu_idle_quiet_s = 2.0;      // no kernel / copy / launch for this long is an idle GPU
  double gpu_idle_recent_s = 5.0;     // NVML: idle is judged on the samples of the window's last seconds
  // Slow, not frozen (rules/slow.cpp), shares of a live window's wall time:
  double data_starved_share = 0.30;  // a main thread waiting on its DataLoader at least this much
  double io_bound_share = 0.50;      // file I/O of the threads that feed it (or its own) at least this much
  double lock_contention_share = 0.30;  // a thread waiting on one lock other waiters hold in turn
  double collective_skew_share = 0.30;  // a rank's main thread in collectives on its peers
  double gpu_idle_share = 0.50;         // NVML samples at or under gpu_idle_util_pct
  double min_profile_window_s = 1.0;    // a shorter window makes no slow-job finding
};

struct Verdict {
  std::string status;  // "killed", "hang", "suspect", "ok"
  std::string summary;
};

// When the job stopped making progress: the moment the last thread of the
// stuck set (the top finding's threads and the main thread's chain to them)
// entered the wait it is still in. Blocked times come from the snapshot, so a
// wait that began before hangtrace attached counts; a wakeup seen live moves
// a thread's wait start later (it ran after it).
struct ProgressStop {
  // CLOCK_MONOTONIC, the live events' clock; 0 when the snapshot has no clock pair.
  uint64_t monotonic_ns = 0;
  double unix_time = 0;  // wall clock, seconds
  double ago_s = 0;      // before the snapshot (or the end of a live window after it)
  std::string basis;     // "snapshot", "snapshot+live" (a live wakeup agrees or moved it later), "live"
  // Only timed waits in the stuck set: a retry loop re-enters its wait at every
  // timeout, so progress stopped at this moment or earlier.
  bool at_the_latest = false;
  int tid = 0, pid = 0;  // the thread that blocked last
  std::string comm;
  std::string thread;               // "worker 212 (pt_data_worker)"
  std::string waits_on;             // its wait summary
  std::vector<int> tids;            // the stuck set that was considered
  int timed_waits_not_counted = 0;  // timed waits left out because untimed ones decide
  std::string live_note;            // what the live window saw of the last thread, or ""
};

struct Diagnosis {
  WaitGraph graph;
  std::vector<Finding> findings;
  Verdict verdict;
  std::optional<ProgressStop> progress_stopped;  // for "hang" and "suspect" verdicts with a stuck set
  std::vector<int> deadlocked_tids;              // certain: no timed wait involved
  std::vector<int> probably_deadlocked_tids;     // only with timed retry loops counted
  StallProfile profile;                          // live windows: where the main threads' time went
};

// `live` (optional) adds what was observed while tracing: deaths and their
// causes (process-killed), RSS growth (memory-growth), who woke whom.
Diagnosis diagnose(const Snapshot& snapshot, const AnalysisOptions& options = {},
                   const LiveObservation* live = nullptr);

// Exit status for the CLI: 0 no hang found, 2 a hang / critical finding.
int exit_status_for(const Diagnosis& d);

}  // namespace hangtrace
