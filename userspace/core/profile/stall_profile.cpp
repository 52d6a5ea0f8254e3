// The stall profile (include/hangtrace/profile.h): each main thread's window
// split by cause, and the critical path behind its waits through who woke
// whom. A wait's cause comes from what the kernel and the job's shape say of
// it, in this order: where it waited (the call's user stack: a CUDA
// synchronize, a collective), what it is (a sleep, a file), who ended it (a
// DataLoader worker, a loader thread, a peer rank, a thread of the same
// process), and else what it waited on (a socket, a lock).
#include "hangtrace/profile.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "hangtrace/abi.h"
#include "hangtrace/analysis.h"
#include "hangtrace/gpu.h"
#include "hangtrace/syscalls.h"
#include "hangtrace/text.h"
#include "gpu_host_time.h"

namespace hangtrace {

const char* stall_cause_name(StallCause c) {
  switch (c) {
#define HANGTRACE_STALL_CAUSE_NAME(id, name, doc) \
  case StallCause::id:                            \
    return name;
    HANGTRACE_STALL_CAUSES(HANGTRACE_STALL_CAUSE_NAME)
#undef HANGTRACE_STALL_CAUSE_NAME
    default:
      return "other";
  }
}

const char* stall_cause_doc(StallCause c) {
  switch (c) {
#define HANGTRACE_STALL_CAUSE_DOC(id, name, doc) \
  case StallCause::id:                           \
    return doc;
    HANGTRACE_STALL_CAUSES(HANGTRACE_STALL_CAUSE_DOC)
#undef HANGTRACE_STALL_CAUSE_DOC
    default:
      return "";
  }
}

const CauseShare* ThreadProfile::cause(StallCause c) const {
  for (const auto& s : causes)
    if (s.cause == c) return &s;
  return nullptr;
}

namespace {

constexpr size_t kMaxObjects = 4;
constexpr size_t kMaxFrames = 5;
constexpr size_t kMaxWakers = 8;
// A relay (a queue's feeder thread) passes on what another thread of its
// process hands it: followed when most of its time waits on that thread.
constexpr double kRelayShare = 0.5;
constexpr double kMinStepShare = 0.05;  // a path step below this share of its parent is left out

// Where "dir/name" splits: the parent's name never holds a '/', except the
// root's, "/" ("//name").
size_t name_separator(std::string_view dir_name) {
  return dir_name.find('/', dir_name.starts_with("/") ? 1 : 0);
}

bool contains_any(const std::string& s, std::initializer_list<const char*> needles) {
  for (const char* n : needles)
    if (s.find(n) != std::string::npos) return true;
  return false;
}

// A wait's time, with what it was on and who ended it.
struct ClassifiedWait {
  const WaitTotal* total;
  StallCause cause;
  std::string what;
};

struct Accumulated {
  uint64_t ns = 0, calls = 0;
  uint32_t buckets[HT_HIST_BUCKETS] = {};
  std::string mount_point, fstype, source;
  std::vector<std::string> files;

  // Adds `from`, its time as `ns` (scaled by the caller); keeps the first mount and a few files.
  void merge(const Accumulated& from, uint64_t from_ns) {
    ns += from_ns;
    calls += from.calls;
    for (int i = 0; i < HT_HIST_BUCKETS; ++i) buckets[i] += from.buckets[i];
    if (mount_point.empty()) {
      mount_point = from.mount_point;
      fstype = from.fstype;
      source = from.source;
    }
    for (const auto& f : from.files)
      if (files.size() < kMaxObjects && std::find(files.begin(), files.end(), f) == files.end())
        files.push_back(f);
  }
};

uint64_t bucket_quantile_ns(const uint32_t* buckets, uint64_t calls, double q) {
  if (!calls) return 0;
  uint64_t want = static_cast<uint64_t>(std::ceil(q * static_cast<double>(calls))), seen = 0;
  for (int i = 0; i < HT_HIST_BUCKETS; ++i) {
    seen += buckets[i];
    // The bucket's middle: [2^i, 2^(i+1)) microseconds.
    if (seen >= std::max<uint64_t>(want, 1)) return static_cast<uint64_t>(1.5 * std::ldexp(1.0, i) * 1000.0);
  }
  return 0;
}

class Profiler {
 public:
  Profiler(const Snapshot& snap, const LiveObservation& live) : snap_(snap), live_(live) {
    window_ns_ = live.end_ns > live.start_ns ? live.end_ns - live.start_ns : 0;
    for (const auto& p : snap.processes)
      for (const auto& t : p.threads) tid_pid_[t.tid] = p.pid;
    for (const auto& [tid, t] : live.thread_times)
      if (!tid_pid_.count(tid)) tid_pid_[tid] = t.pid;
  }

  StallProfile build() {
    StallProfile out;
    out.window_ns = window_ns_;
    if (!window_ns_ || live_.thread_times.empty()) return out;
    out.start_ns = live_.start_ns;
    out.end_ns = live_.end_ns;
    for (int tid : main_threads()) {
      out.mains.push_back(profile_of({tid}));
      std::set<int> visited{tid};
      out.paths.push_back(step_of({tid}, 0, StallCause::Other, 0, 0, visited));
    }
    out.locks = lock_queues();
    for (const auto& q : out.locks) {
      for (const auto& [tid, ns] : q.waiters)
        if (!out.threads.count(tid)) out.threads[tid] = profile_of({tid});
      for (const auto& [tid, ns] : q.holders)
        if (!out.threads.count(tid)) out.threads[tid] = profile_of({tid});
    }
    return out;
  }

  std::vector<LockQueue> lock_queues() const {
    std::map<std::pair<int, uint64_t>, LockQueue> by_lock;
    for (const auto& [tid, totals] : live_.wait_totals)
      for (const WaitTotal& w : totals) {
        if (w.type != HT_EV_FUTEX_WAIT || classify(tid, w) != StallCause::Lock) continue;
        const int pid = w.pid ? w.pid : pid_of(tid);
        LockQueue& q = by_lock[{pid, w.object}];
        q.pid = pid;
        q.address = w.object;
        q.waits += w.count;
        auto add = [](std::vector<std::pair<int, uint64_t>>& v, int t, uint64_t ns) {
          for (auto& [k, n] : v)
            if (k == t) {
              n += ns;
              return;
            }
          v.push_back({t, ns});
        };
        add(q.waiters, tid, w.sum_ns);
        if (w.waker_tid && w.waker_tid != tid) add(q.holders, w.waker_tid, w.sum_ns);
      }
    std::vector<LockQueue> out;
    for (auto& [key, q] : by_lock) {
      if (q.waiters.size() < 2) continue;
      auto by_ns = [](const auto& a, const auto& b) { return a.second > b.second; };
      std::sort(q.waiters.begin(), q.waiters.end(), by_ns);
      std::sort(q.holders.begin(), q.holders.end(), by_ns);
      WaitTotal probe;
      probe.type = HT_EV_FUTEX_WAIT;
      probe.pid = q.pid;
      probe.object = q.address;
      q.what = what_of(q.waiters.front().first, probe, nullptr);
      out.push_back(std::move(q));
    }
    auto total = [](const LockQueue& q) {
      uint64_t n = 0;
      for (const auto& [t, ns] : q.waiters) n += ns;
      return n;
    };
    std::sort(out.begin(), out.end(), [&](const auto& a, const auto& b) { return total(a) > total(b); });
    if (out.size() > 8) out.resize(8);
    return out;
  }

 private:
  int pid_of(int tid) const {
    auto it = tid_pid_.find(tid);
    return it == tid_pid_.end() ? tid : it->second;
  }

  std::string role_of(int pid) const {
    const ProcessInfo* p = snap_.process(pid);
    if (p) return job_role_label(snap_, p);
    // Gone by the snapshot: a process forked in the window by the job (a
    // DataLoader worker of a finished epoch) or traced from the start.
    if (std::find(live_.forked.begin(), live_.forked.end(), pid) != live_.forked.end()) return "worker";
    return live_.meta.count(pid) ? "descendant" : "process";
  }

  std::string comm_of(int tid) const {
    auto it = live_.thread_times.find(tid);
    if (it != live_.thread_times.end() && !it->second.comm.empty()) return it->second.comm;
    if (const ProcessInfo* p = snap_.process(pid_of(tid))) {
      for (const auto& t : p->threads)
        if (t.tid == tid) return t.comm;
      return p->comm;
    }
    return "?";
  }

  const ThreadInfo* thread_info(int tid) const {
    const ProcessInfo* p = snap_.process(pid_of(tid));
    if (!p) return nullptr;
    for (const auto& t : p->threads)
      if (t.tid == tid) return &t;
    return nullptr;
  }

  // A thread of the job that moves batches to the main thread (PyTorch's
  // pin-memory thread), by its Python frames at the snapshot.
  bool is_loader_thread(int tid) const {
    const ThreadInfo* t = thread_info(tid);
    if (!t) return false;
    for (const auto& f : t->python_stack)
      if (contains_any(f.file, {"pin_memory.py", "torch/utils/data/_utils/worker.py"})) return true;
    return false;
  }

  std::vector<int> main_threads() const {
    std::vector<int> out;
    for (const auto& p : snap_.processes) {
      if (p.role == ProcessRole::Peer) continue;
      std::string role = job_role_label(snap_, &p);
      if ((role == "main" || role.starts_with("rank ")) && live_.thread_times.count(p.pid))
        out.push_back(p.pid);
    }
    if (out.empty() && live_.thread_times.count(snap_.target_pid)) out.push_back(snap_.target_pid);
    return out;
  }

  std::vector<std::string> native_frames(int tid, const WaitTotal& w) const {
    std::vector<std::string> out;
    auto it = live_.user_stacks.find({tid, w.ustack_id});
    if (it == live_.user_stacks.end()) return out;
    for (const auto& f : it->second) out.push_back(f.function);
    return out;
  }

  bool in_gil(int pid, uint64_t addr) const {
    const ProcessInfo* p = snap_.process(pid);
    if (!p) return false;
    for (uint64_t g : p->python_gils)
      if (addr >= g && addr < g + 512) return true;
    return false;
  }

  // Which processes of the job hold the other end of a pipe.
  std::vector<int> pipe_holders(uint64_t inode, int except_pid) const {
    std::vector<int> out;
    if (!inode) return out;
    for (const auto& p : snap_.processes) {
      if (p.pid == except_pid) continue;
      for (const auto& f : p.fds)
        if (f.kind == FdKind::Pipe && f.inode == inode) {
          out.push_back(p.pid);
          break;
        }
    }
    return out;
  }

  bool is_worker_role(const std::string& role) const { return role == "worker" || role == "descendant"; }

  StallCause classify(int tid, const WaitTotal& w) const {
    const int pid = w.pid ? w.pid : pid_of(tid);
    for (const std::string& fn : native_frames(tid, w)) {
      if (contains_any(fn, {"cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
                            "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize"}))
        return StallCause::Gpu;
      if (contains_any(fn, {"gloo::", "c10d::", "ncclAllReduce", "ncclGroupEnd", "ProcessGroup"}))
        return StallCause::Collective;
    }
    if (w.type == HT_EV_SYSCALL_BLOCK) {
      WaitClass wc = describe_syscall(w.nr).wait;
      if (wc == WaitClass::Sleep) return StallCause::Sleep;
      if (w.obj_kind == HT_OBJ_FILE) return StallCause::StorageIo;
    }
    if (w.waker_tid) {
      if (w.waker_pid != pid) {
        std::string role = role_of(w.waker_pid);
        if (is_worker_role(role)) return StallCause::DataLoader;
        const std::string own = role_of(pid);
        const bool trainer = own == "main" || own.starts_with("rank ");
        if (trainer && (role.starts_with("rank ") || role == "main")) return StallCause::Collective;
        if (w.obj_kind == HT_OBJ_SOCKET || role == "peer" || role == "process") return StallCause::Network;
        return StallCause::Other;
      }
      if (is_loader_thread(w.waker_tid)) return StallCause::DataLoader;
      if (w.type == HT_EV_FUTEX_WAIT) return StallCause::Lock;
      return StallCause::Other;
    }
    if (w.timed_out) return StallCause::Sleep;
    if (w.obj_kind == HT_OBJ_SOCKET) return StallCause::Network;
    if (w.obj_kind == HT_OBJ_PIPE) {
      for (int holder : pipe_holders(w.object, pid))
        if (is_worker_role(role_of(holder))) return StallCause::DataLoader;
    }
    if (w.type == HT_EV_FUTEX_WAIT) return StallCause::Lock;
    return StallCause::Other;
  }

  const MountEntry* mount_of(int pid, uint32_t mnt_id) const {
    auto it = live_.file_mounts.find({pid, mnt_id});
    return it == live_.file_mounts.end() ? nullptr : &it->second;
  }

  // A record's "dir/name" as a path: under the mount point when the
  // directory is the file system's root, else with "…" for the part between.
  static std::string file_path(const MountEntry* m, const std::string& dir_name) {
    size_t slash = name_separator(dir_name);
    if (slash == std::string::npos) return dir_name;
    const std::string dir = dir_name.substr(0, slash), name = dir_name.substr(slash + 1);
    if (!m) return fmt::format("…/{}", dir == "/" ? name : dir + "/" + name);
    const std::string mp = m->mount_point == "/" ? "" : m->mount_point;
    if (dir == "/" && m->root == "/") return fmt::format("{}/{}", mp, name);
    return fmt::format("{}/…/{}/{}", mp, dir, name);
  }

  // What a wait was on, as one line that groups like waits ("read
  // /mnt/data/…/train/*.jpg", "futex 0x7f12..40", "poll").
  std::string what_of(int tid, const WaitTotal& w, Accumulated* acc) const {
    const int pid = w.pid ? w.pid : pid_of(tid);
    if (w.type == HT_EV_FUTEX_WAIT && w.object == kManyObjects) return "other futexes";
    if (w.type == HT_EV_FUTEX_WAIT)
      return in_gil(pid, w.object) ? fmt::format("the GIL of {}", pid) : fmt::format("futex {:#x}", w.object);
    std::string name = describe_syscall(w.nr).name;
    if (w.obj_kind == HT_OBJ_FILE) {
      std::string dir, ext;
      if (!w.files.empty()) {
        const std::string& f = w.files.front();
        size_t slash = name_separator(f);
        if (slash != std::string::npos) dir = f.substr(0, slash);
        std::string base = slash == std::string::npos ? f : f.substr(slash + 1);
        size_t dot = base.rfind('.');
        ext = dot == std::string::npos ? "" : base.substr(dot);
        for (const auto& g : w.files)
          if (!g.ends_with(ext)) ext.clear();
      }
      std::string where;
      if (const MountEntry* m = mount_of(pid, w.mnt_id)) {
        if (acc) {
          acc->mount_point = m->mount_point;
          acc->fstype = m->fstype;
          acc->source = m->source;
        }
        std::string mp = m->mount_point == "/" ? "" : m->mount_point;
        where = dir.empty() || (dir == "/" && m->root == "/") ? mp : fmt::format("{}/…/{}", mp, dir);
        where += fmt::format("/*{} ({} {})", ext, m->fstype, m->source);
      } else {
        where = dir.empty() ? fmt::format("*{}", ext) : fmt::format("…/{}/*{}", dir, ext);
      }
      if (acc)
        for (const auto& f : w.files) {
          std::string path = file_path(mount_of(pid, w.mnt_id), f);
          if (acc->files.size() < kMaxObjects &&
              std::find(acc->files.begin(), acc->files.end(), path) == acc->files.end())
            acc->files.push_back(path);
        }
      return fmt::format("{} {}", name, where);
    }
    if (w.object == kManyObjects) {
      switch (w.obj_kind) {
        case HT_OBJ_PIPE:
          return name + " other pipes";
        case HT_OBJ_SOCKET:
          return name + " other sockets";
        default:
          return name + " other objects";
      }
    }
    switch (w.obj_kind) {
      case HT_OBJ_PIPE:
        return fmt::format("{} pipe:[{}]", name, w.object);
      case HT_OBJ_SOCKET:
        if (const SocketInfo* s = snap_.socket(w.object); s && !s->remote.empty())
          return fmt::format("{} {} {}", name, s->family, s->remote);
        return fmt::format("{} socket:[{}]", name, w.object);
      default:
        return name;
    }
  }

  // The threads' split of their windows, summed.
  struct GroupTime {
    uint64_t window_ns = 0;
    std::map<StallCause, uint64_t> ns;
    std::map<StallCause, std::map<std::string, Accumulated>> objects;
    std::map<StallCause, std::map<int, uint64_t>> wakers;  // by waker tid
    std::map<std::string, uint64_t> frames;
    uint64_t samples = 0;
  };

  uint64_t thread_window(const ThreadTimes& t) const {
    uint64_t start = t.seen_at_start ? live_.start_ns : std::max(t.first_ns, live_.start_ns);
    // A thread read within the last poll rounds lived to the end.
    uint64_t end = t.last_ns + 1'500'000'000ull >= live_.end_ns ? live_.end_ns : t.last_ns;
    return end > start ? end - start : 0;
  }

  void add_thread(int tid, GroupTime& g) const {
    auto tt = live_.thread_times.find(tid);
    if (tt == live_.thread_times.end()) return;
    const uint64_t window = thread_window(tt->second);
    if (!window) return;
    uint64_t cpu = std::min(tt->second.on_cpu_ns, window);
    uint64_t runq = std::min(tt->second.runnable_ns, window - cpu);
    std::map<StallCause, uint64_t> waits;
    std::map<StallCause, std::map<std::string, Accumulated>> objects;
    std::map<StallCause, std::map<int, uint64_t>> wakers;
    uint64_t waited = 0;
    const GpuHostTime gpu = gpu_host_time(live_, tid);  // gpu_host_time.cpp
    uint64_t gpu_slept = 0;  // of the GPU host waits, the time asleep in the driver
    if (auto wt = live_.wait_totals.find(tid); wt != live_.wait_totals.end()) {
      for (const WaitTotal& w : wt->second) {
        StallCause c = classify(tid, w);
        Accumulated probe;
        std::string what = what_of(tid, w, &probe);
        probe.calls = w.count;
        for (int i = 0; i < HT_HIST_BUCKETS; ++i) probe.buckets[i] = w.buckets[i];
        // Inside a synchronize call: the thread waits for the device,
        // whatever the driver waits on to do it.
        const uint64_t in_gpu = std::min(w.in_gpu_ns, w.sum_ns), rest = w.sum_ns - in_gpu;
        gpu_slept += in_gpu;
        if (rest || !in_gpu) objects[c][what].merge(probe, rest);
        waits[c] += rest;
        waited += w.sum_ns;
        if (w.waker_tid && w.waker_tid != tid) wakers[c][w.waker_tid] += rest;
      }
    }
    if (gpu.calls) objects[StallCause::Gpu][gpu.what].calls = gpu.calls;
    if (gpu_slept) {
      waits[StallCause::Gpu] += gpu_slept;
      objects[StallCause::Gpu][gpu.what].ns += gpu_slept;
    }
    // The rest of the host waits' time the thread spun on a CPU (the
    // driver's default when there are more cores than GPUs), or was
    // waiting for one.
    const uint64_t gpu_left = gpu.returned_ns > gpu_slept ? gpu.returned_ns - gpu_slept : 0;
    const uint64_t spun = std::min(gpu_left, cpu), spun_queued = std::min(gpu_left - spun, runq);
    cpu -= spun;
    runq -= spun_queued;
    if (spun + spun_queued) {
      waits[StallCause::Gpu] += spun + spun_queued;
      waited += spun + spun_queued;
      objects[StallCause::Gpu][gpu.what].ns += spun + spun_queued;
    }
    // Waits overlap the CPU readings by a few ms at the window's edges:
    // scaled down so that the causes add up to the window.
    const uint64_t room = window - cpu - runq;
    const double scale = waited > room ? static_cast<double>(room) / static_cast<double>(waited) : 1.0;
    auto scaled = [&](uint64_t ns) { return static_cast<uint64_t>(static_cast<double>(ns) * scale); };
    uint64_t used = cpu + runq;
    for (auto& [c, ns] : waits) {
      uint64_t s = std::min(scaled(ns), window - used);
      used += s;
      g.ns[c] += s;
    }
    // A call still in progress at the end has had none of its waits summed:
    // the untraced remainder is its, then the CPU it spun on.
    if (gpu.open_ns) {
      const uint64_t asleep = std::min(gpu.open_ns, window - used);
      const uint64_t spinning = std::min(gpu.open_ns - asleep, cpu);
      used += asleep;
      cpu -= spinning;
      g.ns[StallCause::Gpu] += asleep + spinning;
      g.objects[StallCause::Gpu][gpu.what].ns += asleep + spinning;
    }
    g.ns[StallCause::OnCpu] += cpu;
    g.ns[StallCause::Runnable] += runq;
    g.ns[StallCause::Other] += window - used;
    for (auto& [c, objs] : objects)
      for (auto& [what, a] : objs) g.objects[c][what].merge(a, scaled(a.ns));
    for (auto& [c, by] : wakers)
      for (auto& [w, ns] : by) g.wakers[c][w] += scaled(ns);
    g.window_ns += window;
    if (auto cs = live_.cpu_samples.by_tid.find(tid); cs != live_.cpu_samples.by_tid.end())
      for (const auto& [stack, n] : cs->second) {
        g.frames[stack] += n;
        g.samples += n;
      }
  }

  std::vector<CauseShare> shares_of(const GroupTime& g) const {
    std::vector<CauseShare> out;
    for (const auto& [c, ns] : g.ns) {
      if (!ns) continue;
      CauseShare s;
      s.cause = c;
      s.ns = ns;
      s.share = g.window_ns ? static_cast<double>(ns) / static_cast<double>(g.window_ns) : 0;
      if (auto it = g.objects.find(c); it != g.objects.end()) {
        for (const auto& [what, a] : it->second) {
          StallObject o;
          o.what = what;
          o.ns = a.ns;
          o.calls = a.calls;
          o.median_ns = bucket_quantile_ns(a.buckets, a.calls, 0.5);
          o.p90_ns = bucket_quantile_ns(a.buckets, a.calls, 0.9);
          o.mount_point = a.mount_point;
          o.fstype = a.fstype;
          o.source = a.source;
          o.files = a.files;
          s.objects.push_back(std::move(o));
        }
        std::sort(s.objects.begin(), s.objects.end(),
                  [](const auto& a, const auto& b) { return a.ns > b.ns; });
        if (s.objects.size() > kMaxObjects) s.objects.resize(kMaxObjects);
      }
      if (auto it = g.wakers.find(c); it != g.wakers.end()) {
        for (const auto& [tid, ns] : it->second) {
          StallWaker w;
          w.tid = tid;
          w.pid = pid_of(tid);
          w.comm = comm_of(tid);
          w.role = role_of(w.pid);
          w.ns = ns;
          s.wakers.push_back(std::move(w));
        }
        std::sort(s.wakers.begin(), s.wakers.end(), [](const auto& a, const auto& b) { return a.ns > b.ns; });
        if (s.wakers.size() > kMaxWakers) s.wakers.resize(kMaxWakers);
      }
      out.push_back(std::move(s));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ns > b.ns; });
    return out;
  }

  std::vector<FrameShare> frames_of(const GroupTime& g) const {
    std::vector<FrameShare> out;
    for (const auto& [stack, n] : g.frames)
      out.push_back({stack, n, g.samples ? static_cast<double>(n) / static_cast<double>(g.samples) : 0});
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.samples > b.samples; });
    if (out.size() > kMaxFrames) out.resize(kMaxFrames);
    return out;
  }

  ThreadProfile profile_of(const std::vector<int>& tids) const {
    GroupTime g;
    for (int tid : tids) add_thread(tid, g);
    ThreadProfile p;
    p.tid = tids.front();
    p.pid = pid_of(p.tid);
    p.comm = comm_of(p.tid);
    p.role = role_of(p.pid);
    p.window_ns = g.window_ns;
    p.causes = shares_of(g);
    p.cpu_samples = g.samples;
    p.on_cpu_frames = frames_of(g);
    return p;
  }

  // The thread whose work a relay passes on: while most of `tid`'s window
  // is one wait ended by another thread of its process, that thread.
  int follow_relays(int tid) const {
    for (int hop = 0; hop < 3; ++hop) {
      auto wt = live_.wait_totals.find(tid);
      auto tt = live_.thread_times.find(tid);
      if (wt == live_.wait_totals.end() || tt == live_.thread_times.end()) return tid;
      std::map<int, uint64_t> by_waker;
      for (const WaitTotal& w : wt->second)
        if (w.waker_tid && w.waker_tid != tid && w.waker_pid == pid_of(tid))
          by_waker[w.waker_tid] += w.sum_ns;
      auto best = std::max_element(by_waker.begin(), by_waker.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; });
      const uint64_t window = thread_window(tt->second);
      if (best == by_waker.end() || !window ||
          static_cast<double>(best->second) < kRelayShare * static_cast<double>(window))
        return tid;
      tid = best->first;
    }
    return tid;
  }

  std::string label_of(const std::vector<int>& tids) const {
    const int pid = pid_of(tids.front());
    std::string role = role_of(pid);
    bool all_main = std::all_of(tids.begin(), tids.end(), [&](int t) { return pid_of(t) == t; });
    std::vector<std::string> ids;
    for (int t : tids) ids.push_back(std::to_string(t));
    const std::string comm = comm_of(tids.front());
    if (all_main) {
      std::string noun = role;
      if (tids.size() > 1 && !role.starts_with("rank")) noun += role.ends_with("s") ? "es" : "s";
      if (role.starts_with("rank ") && tids.size() > 1) noun = "ranks";
      return fmt::format("{} {} ({})", noun, fmt::join(ids, ", "), comm);
    }
    std::set<int> pids;
    for (int t : tids) pids.insert(pid_of(t));
    if (pids.size() == 1)
      return fmt::format("{} {} of {} {} ({})", tids.size() > 1 ? "threads" : "thread", fmt::join(ids, ", "),
                         role, pid, comm);
    return fmt::format("threads {} ({})", fmt::join(ids, ", "), comm);
  }

  PathStep step_of(const std::vector<int>& tids, int depth, StallCause via, uint64_t ended_ns,
                   uint64_t parent_window, std::set<int>& visited) const {
    GroupTime g;
    for (int tid : tids) add_thread(tid, g);
    PathStep s;
    s.depth = depth;
    s.via = via;
    s.ended_ns = ended_ns;
    s.share_of_parent =
        parent_window ? static_cast<double>(ended_ns) / static_cast<double>(parent_window) : 0;
    s.label = label_of(tids);
    s.tids = tids;
    for (int t : tids)
      if (std::find(s.pids.begin(), s.pids.end(), pid_of(t)) == s.pids.end()) s.pids.push_back(pid_of(t));
    s.window_ns = g.window_ns;
    s.causes = shares_of(g);
    s.on_cpu_frames = frames_of(g);
    if (depth + 1 >= kMaxPathDepth || !g.window_ns) return s;
    // The next steps: who ended this group's waits, relays followed, grouped
    // by cause and by role of process (the workers together).
    struct Next {
      StallCause via;
      std::vector<int> tids;
      uint64_t ns = 0;
    };
    std::map<std::pair<StallCause, std::string>, Next> next;
    for (const auto& [cause, by] : g.wakers)
      for (const auto& [waker, ns] : by) {
        // Only threads of the job, or of a process it talks to that the
        // snapshot saw (a FUSE daemon, a peer): a wakeup from interrupt
        // context names whatever task the interrupt hit.
        if (cause == StallCause::Sleep || role_of(pid_of(waker)) == "process") continue;
        // Threads queued on one lock wake each other: none relays for another.
        int worker = cause == StallCause::Lock ? waker : follow_relays(waker);
        // A DataLoader worker's work runs in its main thread; its other
        // threads (the queue's feeder, the fd sharer) only pass it on.
        if (cause == StallCause::DataLoader && pid_of(worker) != worker &&
            pid_of(worker) != pid_of(tids.front()) && live_.thread_times.count(pid_of(worker)))
          worker = pid_of(worker);
        if (visited.count(worker) || visited.count(waker)) continue;
        const int wpid = pid_of(worker);
        Next& n = next[{cause, fmt::format("{}|{}", role_of(wpid), pid_of(worker) == worker ? 0 : wpid)}];
        n.via = cause;
        if (std::find(n.tids.begin(), n.tids.end(), worker) == n.tids.end()) n.tids.push_back(worker);
        n.ns += ns;
      }
    std::vector<Next> order;
    for (auto& [key, n] : next)
      if (static_cast<double>(n.ns) >= kMinStepShare * static_cast<double>(g.window_ns)) order.push_back(n);
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.ns > b.ns; });
    if (order.size() > kMaxPathFanout) order.resize(kMaxPathFanout);
    for (auto& n : order) {
      std::sort(n.tids.begin(), n.tids.end());
      for (int t : n.tids) visited.insert(t);
    }
    for (auto& n : order) s.next.push_back(step_of(n.tids, depth + 1, n.via, n.ns, g.window_ns, visited));
    return s;
  }

  const Snapshot& snap_;
  const LiveObservation& live_;
  uint64_t window_ns_ = 0;
  std::map<int, int> tid_pid_;
};

}  // namespace

StallProfile build_stall_profile(const Snapshot& snapshot, const LiveObservation& live) {
  return Profiler(snapshot, live).build();
}

}  // namespace hangtrace
