// hangtrace doctor: the pre-flight checklist (include/hangtrace/doctor.h, docs/doctor.md).
#include "hangtrace/doctor.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "hangtrace/collectives.h"
#include "hangtrace/procfs.h"

namespace hangtrace::doctor {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kDockerShm = 64 * kMiB;  // docker run without --shm-size / --ipc=host
constexpr int kDefaultPrefetch = 2;         // DataLoader(prefetch_factor=2)
constexpr uint64_t kNofileLow = 4096;       // below this, file_descriptor sharing runs out early
constexpr const char* kTorchShmPrefix = "/dev/shm/torch_";

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }

std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return std::string(s);
}

Check make(std::string id, Verdict v, std::string finding, std::string fix = "",
           nlohmann::json details = nlohmann::json::object()) {
  Check c;
  c.id = std::move(id);
  c.verdict = v;
  c.finding = std::move(finding);
  c.fix = std::move(fix);
  c.details = details.is_null() ? nlohmann::json::object() : std::move(details);
  return c;
}

// A child of the target and what it is.
enum class ChildKind { Forked, Spawned, ForkServer, ShmManager, Tracker, Other };

struct Child {
  int pid = 0;
  ChildKind kind = ChildKind::Other;
  std::string comm, cmdline;
};

struct Segment {
  uint64_t inode = 0;
  uint64_t bytes = 0;
  bool deleted = false;
  std::string name;
  std::set<int> pids;
};

// What /proc shows of the target, read once.
struct Target {
  int pid = 0;
  std::string comm, cmdline, exe, environ;
  int threads = 0;
  std::string limits;
  std::vector<Child> children;
  std::vector<int> workers;               // worker-like children (and a forkserver's children)
  std::string start_method;               // "fork", "spawn", "forkserver", "" (no workers)
  bool shm_manager = false;               // torch_shm_manager: the file_system strategy
  std::map<uint64_t, Segment> segments;   // /dev/shm/torch_* by inode
  size_t torch_fds = 0;                   // fds on /dev/shm/torch_* (file_descriptor strategy)
  std::map<int, size_t> open_fds;         // per process of the job
  std::vector<std::string> mapped_paths;  // the target's mapped files
};

ChildKind classify_child(const std::string& comm, const std::string& cmdline, const std::string& exe,
                         const Target& t) {
  if (starts_with(comm, "torch_shm_manag") || contains(exe, "torch_shm_manager"))
    return ChildKind::ShmManager;
  if (contains(cmdline, "resource_tracker") || contains(cmdline, "semaphore_tracker"))
    return ChildKind::Tracker;
  if (contains(cmdline, "forkserver")) return ChildKind::ForkServer;
  if (contains(cmdline, "spawn_main") || contains(cmdline, "--multiprocessing-fork"))
    return ChildKind::Spawned;
  if (!t.cmdline.empty() && cmdline == t.cmdline && exe == t.exe) return ChildKind::Forked;
  return ChildKind::Other;
}

std::vector<int> children_of(const procfs::ProcFs& fs, const std::vector<int>& all, int parent) {
  std::vector<int> out;
  for (int p : all) {
    if (p == parent) continue;
    auto st = fs.stat(p);
    if (st && st->ppid == parent) out.push_back(p);
  }
  return out;
}

void read_segments_and_fds(const procfs::ProcFs& fs, int pid, Target& t) {
  if (auto maps = fs.maps(pid)) {
    for (const auto& m : *maps) {
      std::string path = m.path;
      bool deleted = false;
      if (constexpr std::string_view kDel = " (deleted)";
          path.size() > kDel.size() && path.compare(path.size() - kDel.size(), kDel.size(), kDel) == 0) {
        path.resize(path.size() - kDel.size());
        deleted = true;
      }
      if (pid == t.pid) t.mapped_paths.push_back(path);
      if (!starts_with(path, kTorchShmPrefix)) continue;
      Segment& s = t.segments[m.inode];
      s.inode = m.inode;
      s.bytes = std::max(s.bytes, m.end - m.start);
      s.deleted = s.deleted || deleted;
      s.name = path.substr(std::strlen("/dev/shm/"));
      s.pids.insert(pid);
    }
  }
  auto fds = fs.fds(pid);
  if (!fds) return;
  t.open_fds[pid] = fds->size();
  for (int fd : *fds) {
    auto link = fs.fd_link(pid, fd);
    if (!link) continue;
    procfs::FdLinkInfo info = procfs::classify_fd_link(*link);
    if (!starts_with(info.path, kTorchShmPrefix)) continue;
    t.torch_fds++;
    struct stat st {};
    std::string fd_path = fmt::format("{}/fd/{}", fs.pid_path(pid), fd);
    if (stat(fd_path.c_str(), &st) != 0) continue;
    Segment& s = t.segments[static_cast<uint64_t>(st.st_ino)];
    s.inode = static_cast<uint64_t>(st.st_ino);
    s.bytes = std::max<uint64_t>(s.bytes, static_cast<uint64_t>(st.st_size));
    s.deleted = s.deleted || info.deleted;
    s.name = info.path.substr(std::strlen("/dev/shm/"));
    s.pids.insert(pid);
  }
}

Result<procfs::ProcStat> target_stat(const procfs::ProcFs& fs, int pid) {
  if (pid <= 0) return make_error(fmt::format("no such process: {}", pid));
  int err = 0;
  auto st = fs.stat(pid, &err);
  if (!st) {
    if (procfs::is_gone_errno(err)) return make_error(fmt::format("no such process: {}", pid));
    return make_error(st.error());
  }
  if (st->is_kernel_thread())
    return make_error(fmt::format("pid {} is a kernel thread, not a training job", pid));
  return st;
}

Result<Target> read_target(const DoctorInputs& in) {
  procfs::ProcFs fs(in.proc_root);
  Target t;
  t.pid = in.pid;
  auto st = target_stat(fs, in.pid);
  if (!st) return make_error(st.error());
  t.comm = st->comm;
  t.threads = st->num_threads;
  if (auto c = fs.cmdline(in.pid)) t.cmdline = *c;
  if (auto e = fs.exe(in.pid)) t.exe = *e;
  if (auto e = procfs::read_text_file(fs.pid_path(in.pid) + "/environ")) t.environ = *e;
  if (auto l = procfs::read_text_file(fs.pid_path(in.pid) + "/limits")) t.limits = *l;

  std::vector<int> all;
  if (auto p = fs.pids()) all = *p;
  for (int c : children_of(fs, all, in.pid)) {
    Child child;
    child.pid = c;
    if (auto s = fs.stat(c)) child.comm = s->comm;
    if (auto cl = fs.cmdline(c)) child.cmdline = *cl;
    std::string exe;
    if (auto e = fs.exe(c)) exe = *e;
    child.kind = classify_child(child.comm, child.cmdline, exe, t);
    switch (child.kind) {
      case ChildKind::Forked:
        t.workers.push_back(c);
        if (t.start_method.empty()) t.start_method = "fork";
        break;
      case ChildKind::Spawned:
        t.workers.push_back(c);
        if (t.start_method.empty()) t.start_method = "spawn";
        break;
      case ChildKind::ForkServer:
        for (int g : children_of(fs, all, c)) t.workers.push_back(g);
        t.start_method = "forkserver";
        break;
      case ChildKind::ShmManager:
        t.shm_manager = true;
        break;
      default:
        break;
    }
    t.children.push_back(std::move(child));
  }
  read_segments_and_fds(fs, in.pid, t);
  for (int w : t.workers) read_segments_and_fds(fs, w, t);
  return t;
}

// ---- the checks -------------------------------------------------------------

std::string pids_text(const std::vector<int>& pids) {
  std::string s;
  for (int p : pids) s += (s.empty() ? "" : ",") + std::to_string(p);
  return s;
}

Check check_dev_shm(const DoctorInputs& in, const Target* t) {
  std::string path = !in.dev_shm.empty() ? in.dev_shm
                     : t                 ? fmt::format("{}/{}/root/dev/shm", in.proc_root, t->pid)
                                         : std::string("/dev/shm");
  auto usage = in.statvfs ? in.statvfs(path) : statvfs_usage(path);
  if (!usage)
    return make("dev-shm-size", Verdict::Fail, fmt::format("cannot measure /dev/shm: {}", usage.error()),
                "mount a tmpfs on /dev/shm (docker run --shm-size=16g, or --ipc=host)");
  const uint64_t size = usage->size_bytes, free = usage->free_bytes;
  nlohmann::json d = {{"path", path}, {"size_bytes", size}, {"free_bytes", free}};
  const std::string fix =
      "give the job a bigger /dev/shm: docker run --shm-size=16g (or --ipc=host); Kubernetes: an emptyDir "
      "{medium: Memory, sizeLimit: 16Gi} mounted at /dev/shm; or fewer workers / a smaller prefetch_factor";
  const bool docker_default = size == kDockerShm;
  std::string where = fmt::format("/dev/shm is {} ({} free)", format_bytes(size), format_bytes(free));
  if (docker_default) where += ", Docker's default size";

  if (!t) {
    d["docker_default"] = docker_default;
    if (docker_default || size < kDockerShm)
      return make("dev-shm-size", Verdict::Warn,
                  where +
                      "; a DataLoader with workers needs workers x prefetch_factor x batch bytes of it "
                      "(--pid PID measures that)",
                  fix, d);
    if (size > 0 && free * 10 < size)
      return make("dev-shm-size", Verdict::Warn, where + "; over 90% used",
                  "find what holds it: ls -la /dev/shm", d);
    return make("dev-shm-size", Verdict::Ok, where, "", d);
  }

  uint64_t held = 0, largest = 0;
  for (const auto& [inode, s] : t->segments) {
    held += s.bytes;
    largest = std::max(largest, s.bytes);
  }
  const size_t workers = t->workers.size();
  const int prefetch = in.prefetch_factor.value_or(kDefaultPrefetch);
  std::optional<uint64_t> batch = in.batch_bytes;
  std::string batch_from = "--batch-bytes";
  if (!batch && largest > 0) {
    batch = largest;
    batch_from = fmt::format("largest torch segment mapped now ({} segment(s), {} held)", t->segments.size(),
                             format_bytes(held));
  }
  d["workers"] = workers;
  d["worker_pids"] = t->workers;
  d["prefetch_factor"] = prefetch;
  d["prefetch_factor_assumed"] = !in.prefetch_factor.has_value();
  d["held_bytes"] = held;
  d["segments"] = t->segments.size();
  d["docker_default"] = docker_default;
  if (batch) d["batch_bytes"] = *batch;
  d["batch_bytes_from"] = batch ? batch_from : "unknown";

  if (workers == 0) {
    d["need_bytes"] = 0;
    Verdict v = size < kDockerShm ? Verdict::Warn : Verdict::Ok;
    return make("dev-shm-size", v,
                where +
                    "; no DataLoader worker processes (forked/spawned children) seen: batches don't go "
                    "through /dev/shm",
                v == Verdict::Ok ? "" : fix, d);
  }
  std::string prefetch_text = in.prefetch_factor
                                  ? fmt::format("prefetch_factor {}", prefetch)
                                  : fmt::format("prefetch_factor {} (assumed: torch's default)", prefetch);
  if (!batch) {
    Verdict v = docker_default || size < kDockerShm ? Verdict::Warn : Verdict::Ok;
    return make(
        "dev-shm-size", v,
        fmt::format("{}; {} workers ({}), {}; no torch tensor in /dev/shm right now to size a batch: pass "
                    "--batch-bytes",
                    where, workers, pids_text(t->workers), prefetch_text),
        v == Verdict::Ok ? "" : fix, d);
  }
  const uint64_t need = static_cast<uint64_t>(workers) * static_cast<uint64_t>(prefetch) * *batch;
  // The job's own segments are part of the need: they count as available.
  const uint64_t available = std::min(size, free + held);
  d["need_bytes"] = need;
  d["available_bytes"] = available;
  std::string figures =
      fmt::format("{}; need ~{} = {} workers x {} x {} batch ({})", where, format_bytes(need), workers,
                  prefetch_text, format_bytes(*batch), batch_from);
  if (need > available)
    return make(
        "dev-shm-size", Verdict::Fail,
        fmt::format("{}: more than the {} the job can have; workers will die of SIGBUS (Bus error) or "
                    "the loader hangs",
                    figures, format_bytes(available)),
        fix, d);
  if (need * 2 > available)
    return make("dev-shm-size", Verdict::Warn,
                fmt::format("{}: over half of the {} available", figures, format_bytes(available)), fix, d);
  if (docker_default)
    return make("dev-shm-size", Verdict::Warn,
                figures + ": fits, but in Docker's 64 MiB default a bigger batch or one more worker will not",
                fix, d);
  return make("dev-shm-size", Verdict::Ok, figures, "", d);
}

Check check_sharing_strategy(const Target* t) {
  if (!t)
    return make(
        "sharing-strategy", Verdict::Skip,
        "no --pid: torch's default on Linux is file_descriptor (one fd per shared tensor, counts against "
        "ulimit -n)");
  if (t->mapped_paths.empty() && t->segments.empty())
    return make("sharing-strategy", Verdict::Skip, "cannot read the target's mappings");
  bool torch_loaded = std::any_of(t->mapped_paths.begin(), t->mapped_paths.end(), [](const std::string& p) {
    return contains(p, "libtorch") || contains(p, "torch/_C");
  });
  if (!torch_loaded) return make("sharing-strategy", Verdict::Skip, "torch is not loaded in the target");
  size_t named = 0, unlinked = 0;
  for (const auto& [inode, s] : t->segments) (s.deleted ? unlinked : named)++;
  nlohmann::json d = {{"named_segments", named},
                      {"unlinked_segments", unlinked},
                      {"torch_fds", t->torch_fds},
                      {"torch_shm_manager", t->shm_manager}};
  if (t->shm_manager || named > 0) {
    d["strategy"] = "file_system";
    return make(
        "sharing-strategy", Verdict::Ok,
        fmt::format("file_system ({}{} named /dev/shm/torch_* segment(s)): no fd per tensor; segments of a "
                    "killed job stay in /dev/shm until removed",
                    t->shm_manager ? "torch_shm_manager running, " : "", named),
        "", d);
  }
  d["strategy"] = "file_descriptor";
  std::string evidence =
      unlinked > 0
          ? fmt::format("{} unlinked /dev/shm/torch_* segment(s), {} fd(s) on them", unlinked, t->torch_fds)
          : std::string("no torch segment seen and no torch_shm_manager: torch's default");
  return make(
      "sharing-strategy", Verdict::Ok,
      fmt::format("file_descriptor ({}): every tensor in flight holds an fd, see ulimit-nofile", evidence),
      "", d);
}

std::string limit_text(const std::optional<uint64_t>& v) { return v ? std::to_string(*v) : "unlimited"; }

Check check_nofile(const Target* t, const std::string& self_limits) {
  const std::string& text = t ? t->limits : self_limits;
  auto lim = parse_limit(text, "Max open files");
  if (!lim)
    return make("ulimit-nofile", Verdict::Skip,
                fmt::format("cannot read the open-files limit: {}", lim.error()));
  nlohmann::json d = {{"soft", lim->soft ? nlohmann::json(*lim->soft) : nlohmann::json("unlimited")},
                      {"hard", lim->hard ? nlohmann::json(*lim->hard) : nlohmann::json("unlimited")}};
  std::string fix =
      "raise it before starting the job: ulimit -n 65536 (docker run --ulimit nofile=65536:65536), or "
      "torch.multiprocessing.set_sharing_strategy('file_system')";
  if (!t) {
    bool low = lim->soft && *lim->soft < kNofileLow;
    return make(
        "ulimit-nofile", low ? Verdict::Warn : Verdict::Ok,
        fmt::format("this shell's ulimit -n is {} (hard {}){}", limit_text(lim->soft), limit_text(lim->hard),
                    low ? fmt::format(": under {}, DataLoader workers sharing tensors by fd run out "
                                      "(\"Too many open files\")",
                                      kNofileLow)
                        : ""),
        low ? fix : "", d);
  }
  size_t most = 0;
  int most_pid = t->pid;
  for (const auto& [pid, n] : t->open_fds)
    if (n > most) most = n, most_pid = pid;
  d["most_open_fds"] = most;
  d["most_open_fds_pid"] = most_pid;
  std::string base = fmt::format("soft limit {} (hard {}), most open fds {} (pid {})", limit_text(lim->soft),
                                 limit_text(lim->hard), most, most_pid);
  if (lim->soft && most * 10 >= *lim->soft * 9)
    return make("ulimit-nofile", Verdict::Fail, base + ": at the limit, the next shared tensor fails", fix,
                d);
  bool fd_strategy = !t->shm_manager && std::none_of(t->segments.begin(), t->segments.end(),
                                                     [](const auto& kv) { return !kv.second.deleted; });
  if (lim->soft && most * 2 >= *lim->soft)
    return make("ulimit-nofile", Verdict::Warn, base + ": over half used", fix, d);
  if (lim->soft && *lim->soft < kNofileLow && fd_strategy && !t->workers.empty())
    return make("ulimit-nofile", Verdict::Warn,
                fmt::format("{}: under {} with file_descriptor sharing and {} workers", base, kNofileLow,
                            t->workers.size()),
                fix, d);
  return make("ulimit-nofile", Verdict::Ok, base, "", d);
}

Check check_memlock(const std::string& self_limits, std::optional<std::pair<int, int>> kernel) {
  auto lim = parse_limit(self_limits, "Max locked memory");
  if (!lim)
    return make("ulimit-memlock", Verdict::Skip,
                fmt::format("cannot read doctor's memlock limit: {}", lim.error()));
  nlohmann::json d = {{"soft", lim->soft ? nlohmann::json(*lim->soft) : nlohmann::json("unlimited")}};
  std::string figures =
      fmt::format("hangtrace's memlock limit is {}", lim->soft ? format_bytes(*lim->soft) : "unlimited");
  if (kernel && *kernel >= std::pair<int, int>{5, 11}) {
    d["memcg_accounting"] = true;
    return make("ulimit-memlock", Verdict::Ok,
                figures + "; not used for BPF maps on kernel >= 5.11 (charged to the memory cgroup)", "", d);
  }
  d["memcg_accounting"] = false;
  if (lim->soft && *lim->soft < 64 * kMiB)
    return make("ulimit-memlock", Verdict::Warn,
                figures +
                    "; kernels before 5.11 charge BPF maps to it (hangtrace's ring buffer and stack map need "
                    "tens of MiB)",
                "ulimit -l unlimited before running hangtrace (docker run --ulimit memlock=-1)", d);
  return make("ulimit-memlock", Verdict::Ok, figures + "; enough for BPF maps on this pre-5.11 kernel", "",
              d);
}

bool truthy(const std::optional<std::string>& v) {
  return v && !v->empty() && *v != "0" && *v != "false" && *v != "False" && *v != "OFF" && *v != "off";
}

void check_environment(const DoctorInputs& in, const Target* t,
                       const std::optional<std::string>& torch_version, std::vector<Check>& out) {
  const std::string& env = t ? t->environ : in.self_environ;
  const std::string whose = t ? fmt::format("pid {}", t->pid) : std::string("this shell");
  auto get = [&](const char* key) { return environ_value(env, key); };
  RankIdentity rank = parse_rank_environment(env);
  const bool distributed = rank.world_size.has_value() || rank.rank.has_value();
  std::string job = distributed ? fmt::format("rank {} of {}", rank.rank ? std::to_string(*rank.rank) : "?",
                                              rank.world_size ? std::to_string(*rank.world_size) : "?")
                                : "";
  const std::string not_dist = fmt::format("{} has no RANK/WORLD_SIZE: not a torch.distributed job", whose);

  // NCCL_DEBUG
  if (!distributed) {
    out.push_back(make("nccl-debug", Verdict::Skip, not_dist));
    out.push_back(make("torch-distributed-debug", Verdict::Skip, not_dist));
    out.push_back(make("nccl-async-error-handling", Verdict::Skip, not_dist));
  } else {
    auto v = get("NCCL_DEBUG");
    out.push_back(
        v && !v->empty()
            ? make("nccl-debug", Verdict::Ok, fmt::format("NCCL_DEBUG={} ({})", *v, job), "",
                   {{"NCCL_DEBUG", *v}})
            : make("nccl-debug", Verdict::Warn,
                   fmt::format("NCCL_DEBUG unset ({}): a stuck NCCL init or collective leaves no log", job),
                   "export NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,COLL for more)"));
    auto dd = get("TORCH_DISTRIBUTED_DEBUG");
    bool dd_on = dd && (*dd == "INFO" || *dd == "DETAIL");
    out.push_back(dd_on ? make("torch-distributed-debug", Verdict::Ok,
                               fmt::format("TORCH_DISTRIBUTED_DEBUG={}", *dd), "",
                               {{"TORCH_DISTRIBUTED_DEBUG", *dd}})
                        : make("torch-distributed-debug", Verdict::Warn,
                               fmt::format("TORCH_DISTRIBUTED_DEBUG {} ({}): a rank that calls a different "
                                           "collective, or none, is not named",
                                           dd ? "=" + *dd : std::string("unset"), job),
                               "export TORCH_DISTRIBUTED_DEBUG=DETAIL (checks collective order across ranks; "
                               "INFO is cheaper)"));
    // torch >= 2.2 reads TORCH_NCCL_*, older ones NCCL_*; either wins here.
    auto async_new = get("TORCH_NCCL_ASYNC_ERROR_HANDLING"), async_old = get("NCCL_ASYNC_ERROR_HANDLING");
    auto block_new = get("TORCH_NCCL_BLOCKING_WAIT"), block_old = get("NCCL_BLOCKING_WAIT");
    nlohmann::json d = nlohmann::json::object();
    for (auto [k, v2] :
         {std::pair{"TORCH_NCCL_ASYNC_ERROR_HANDLING", &async_new},
          std::pair{"NCCL_ASYNC_ERROR_HANDLING", &async_old},
          std::pair{"TORCH_NCCL_BLOCKING_WAIT", &block_new}, std::pair{"NCCL_BLOCKING_WAIT", &block_old}})
      if (*v2) d[k] = **v2;
    bool old_torch =
        torch_version && (starts_with(*torch_version, "1.") || starts_with(*torch_version, "2.0") ||
                          starts_with(*torch_version, "2.1"));
    std::string var = old_torch ? "NCCL_ASYNC_ERROR_HANDLING" : "TORCH_NCCL_ASYNC_ERROR_HANDLING";
    if (truthy(async_new) || truthy(async_old) || truthy(block_new) || truthy(block_old)) {
      std::string which = truthy(async_new)   ? "TORCH_NCCL_ASYNC_ERROR_HANDLING=" + *async_new
                          : truthy(async_old) ? "NCCL_ASYNC_ERROR_HANDLING=" + *async_old
                          : truthy(block_new) ? "TORCH_NCCL_BLOCKING_WAIT=" + *block_new
                                              : "NCCL_BLOCKING_WAIT=" + *block_old;
      out.push_back(make(
          "nccl-async-error-handling", Verdict::Ok,
          which + ": a collective past init_process_group(timeout=...) aborts instead of hanging", "", d));
    } else {
      out.push_back(
          make("nccl-async-error-handling", Verdict::Warn,
               fmt::format("neither {0} nor a blocking wait is on ({1}): with torch < 2.2 a stuck NCCL "
                           "collective waits forever, init_process_group(timeout=...) is not enforced",
                           var, job),
               fmt::format("export {}=1 and pass init_process_group(..., "
                           "timeout=datetime.timedelta(minutes=10))",
                           var),
               d));
    }
  }

  // CUDA_LAUNCH_BLOCKING
  auto clb = get("CUDA_LAUNCH_BLOCKING");
  if (truthy(clb))
    out.push_back(make(
        "cuda-launch-blocking", Verdict::Warn,
        fmt::format("CUDA_LAUNCH_BLOCKING={} in {}: every kernel launch waits for the GPU (right for "
                    "locating a device-side assert, slow for training)",
                    *clb, whose),
        "unset CUDA_LAUNCH_BLOCKING once the failing kernel is found", {{"CUDA_LAUNCH_BLOCKING", *clb}}));
  else
    out.push_back(
        make("cuda-launch-blocking", Verdict::Ok,
             fmt::format("CUDA_LAUNCH_BLOCKING {} in {}: launches are asynchronous (set it to 1 only to "
                         "locate a device-side assert)",
                         clb ? "=" + *clb : std::string("unset"), whose)));

  // OMP_NUM_THREADS
  auto omp = get("OMP_NUM_THREADS");
  nlohmann::json od = {{"online_cpus", in.online_cpus}};
  if (!omp) {
    out.push_back(
        make("omp-num-threads", Verdict::Ok,
             fmt::format("OMP_NUM_THREADS unset in {}: torch uses one thread per core ({}); DataLoader "
                         "workers run with 1",
                         whose, in.online_cpus),
             "", od));
  } else {
    od["OMP_NUM_THREADS"] = *omp;
    auto n = parse_u64(trim(*omp));
    if (!n || *n == 0)
      out.push_back(make("omp-num-threads", Verdict::Warn,
                         fmt::format("OMP_NUM_THREADS={} is not a positive number", *omp),
                         "export OMP_NUM_THREADS=<cores per rank>", od));
    else if (*n > in.online_cpus)
      out.push_back(make("omp-num-threads", Verdict::Warn,
                         fmt::format("OMP_NUM_THREADS={} exceeds the {} online CPUs: threads oversubscribe",
                                     *n, in.online_cpus),
                         fmt::format("export OMP_NUM_THREADS={} (cores / ranks per node)", in.online_cpus),
                         od));
    else
      out.push_back(make("omp-num-threads", Verdict::Ok,
                         fmt::format("OMP_NUM_THREADS={} ({} online CPUs)", *n, in.online_cpus), "", od));
  }
}

Check check_start_method(const Target* t) {
  if (!t) return make("start-method", Verdict::Skip, "no --pid: the start method shows in the job's workers");
  nlohmann::json d = {{"workers", t->workers}, {"main_threads", t->threads}, {"method", t->start_method}};
  if (t->workers.empty())
    return make("start-method", Verdict::Skip, "no worker processes (forked or spawned children) to judge",
                "", d);
  if (t->start_method == "fork" && t->threads > 1)
    return make(
        "start-method", Verdict::Warn,
        fmt::format("workers {} are forked (same command line as pid {}), whose {} threads run now: a lock "
                    "another thread held at fork() stays held forever in the child",
                    pids_text(t->workers), t->pid, t->threads),
        "DataLoader(..., multiprocessing_context='spawn') (or 'forkserver')", d);
  if (t->start_method == "fork")
    return make(
        "start-method", Verdict::Ok,
        fmt::format("workers {} are forked from a single-threaded main process", pids_text(t->workers)), "",
        d);
  return make("start-method", Verdict::Ok,
              fmt::format("workers {} use {}: no locks inherited", pids_text(t->workers), t->start_method),
              "", d);
}

// ---- kernel, BPF, versions ---------------------------------------------------

std::optional<uint64_t> cap_eff(std::string_view status) {
  auto pos = status.find("CapEff:");
  if (pos == std::string_view::npos) return std::nullopt;
  std::string_view rest = status.substr(pos + 7);
  auto end = rest.find('\n');
  std::string hex = trim(rest.substr(0, end));
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
  if (ec != std::errc() || p != hex.data() + hex.size()) return std::nullopt;
  return v;
}

Check check_privileges(const std::string& self_status) {
  auto caps = cap_eff(self_status);
  if (!caps) return make("privileges", Verdict::Skip, "cannot read CapEff of doctor's own process");
  constexpr int kCapSysAdmin = 21, kCapPerfmon = 38, kCapBpf = 39, kCapSysPtrace = 19;
  auto has = [&](int c) { return ((*caps >> c) & 1) != 0; };
  nlohmann::json d = {{"cap_eff", fmt::format("{:016x}", *caps)}};
  bool bpf = has(kCapSysAdmin) || (has(kCapBpf) && has(kCapPerfmon));
  if (bpf && has(kCapSysPtrace))
    return make("privileges", Verdict::Ok,
                "running with CAP_BPF/CAP_PERFMON (or CAP_SYS_ADMIN) and CAP_SYS_PTRACE", "", d);
  return make("privileges", Verdict::Warn,
              fmt::format("missing {}{}: hangtrace cannot load BPF or read other processes' memory",
                          bpf ? "" : "CAP_BPF+CAP_PERFMON ", has(kCapSysPtrace) ? "" : "CAP_SYS_PTRACE"),
              "run hangtrace with sudo (in a container: --cap-add SYS_ADMIN,SYS_PTRACE or --privileged)", d);
}

Check check_kernel(const std::string& release) {
  if (release.empty()) return make("kernel", Verdict::Skip, "cannot read the kernel release");
  auto v = parse_kernel_release(release);
  nlohmann::json d = {{"release", release}};
  if (!v)
    return make("kernel", Verdict::Warn, fmt::format("kernel {}: cannot parse the version", release), "", d);
  if (*v < std::pair<int, int>{5, 8})
    return make(
        "kernel", Verdict::Warn,
        fmt::format("kernel {}: before 5.8, no BPF ring buffer: live tracing is off, snapshots still work",
                    release),
        "use a 5.8+ kernel (5.11+ for memcg-accounted BPF memory)", d);
  return make("kernel", Verdict::Ok, fmt::format("kernel {}", release), "", d);
}

Check check_btf(const DoctorInputs& in) {
  std::string path = in.sys_root + "/kernel/btf/vmlinux";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return make("btf", Verdict::Fail,
                fmt::format("{} missing ({}): hangtrace's BPF programs (CO-RE) cannot load", path,
                            std::strerror(errno)),
                "use a kernel built with CONFIG_DEBUG_INFO_BTF=y (every major distro kernel since 2020)",
                {{"path", path}});
  return make("btf", Verdict::Ok,
              fmt::format("{} present ({})", path, format_bytes(static_cast<uint64_t>(st.st_size))), "",
              {{"path", path}, {"size_bytes", static_cast<uint64_t>(st.st_size)}});
}

Check check_hooks(const HookProbe& h) {
  if (!h.attempted)
    return make("bpf-hooks", Verdict::Skip, h.not_attempted_why.empty() ? "not probed" : h.not_attempted_why);
  if (!h.error.empty())
    return make("bpf-hooks", Verdict::Fail, fmt::format("the live tracer did not start: {}", h.error),
                "check dmesg and `hangtrace --list-hooks -vvv` for the verifier's log");
  nlohmann::json d = {
      {"active", h.active}, {"standby", h.standby}, {"off", h.off}, {"off_hooks", h.off_hooks}};
  std::string figures =
      fmt::format("{} hooks active, {} twins on standby, {} unavailable", h.active, h.standby, h.off);
  if (h.off > 0) {
    std::string names;
    for (size_t i = 0; i < h.off_hooks.size() && i < 3; ++i) names += (i ? "; " : "") + h.off_hooks[i];
    if (h.off_hooks.size() > 3) names += fmt::format("; +{} more", h.off_hooks.size() - 3);
    return make("bpf-hooks", Verdict::Warn, figures + ": " + names,
                "hangtrace --list-hooks shows each and why", d);
  }
  return make("bpf-hooks", Verdict::Ok, figures, "", d);
}

std::optional<std::string> torch_version_of(const DoctorInputs& in, const Target* t, std::string* where) {
  if (!t) {
    auto text = procfs::read_text_file(in.default_torch_version_py);
    if (!text) return std::nullopt;
    *where = in.default_torch_version_py;
    return parse_torch_version_py(*text);
  }
  // .../site-packages/torch/_C.cpython-*.so or .../torch/lib/libtorch*.so: version.py is in torch/.
  for (const auto& p : t->mapped_paths) {
    std::string dir;
    if (auto pos = p.rfind("/torch/_C"); pos != std::string::npos)
      dir = p.substr(0, pos + 6);
    else if (auto pos2 = p.rfind("/torch/lib/libtorch"); pos2 != std::string::npos)
      dir = p.substr(0, pos2 + 6);
    if (dir.empty()) continue;
    std::string path = fmt::format("{}/{}/root{}/version.py", in.proc_root, t->pid, dir);
    if (auto text = procfs::read_text_file(path))
      if (auto v = parse_torch_version_py(*text)) {
        *where = dir + "/version.py";
        return v;
      }
  }
  // Distro builds: /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0.
  for (const auto& p : t->mapped_paths) {
    auto pos = p.rfind("/libtorch_cpu.so.");
    if (pos == std::string::npos) continue;
    *where = p;
    return p.substr(pos + std::strlen("/libtorch_cpu.so."));
  }
  return std::nullopt;
}

std::optional<std::string> python_version_of(const Target* t, std::string* where) {
  if (!t) return std::nullopt;
  auto version_in = [](const std::string& s, const std::string& key) -> std::optional<std::string> {
    auto pos = s.rfind(key);
    if (pos == std::string::npos) return std::nullopt;
    std::string v;
    for (size_t i = pos + key.size();
         i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.'); ++i)
      v += s[i];
    while (!v.empty() && v.back() == '.') v.pop_back();
    if (v.empty() || v.find('.') == std::string::npos) return std::nullopt;
    return v;
  };
  for (const auto& p : t->mapped_paths)
    if (auto v = version_in(p, "/libpython")) {
      *where = p;
      return v;
    }
  std::string exe_name = t->exe.substr(t->exe.rfind('/') + 1);
  if (starts_with(exe_name, "python"))
    if (auto v = version_in("/" + exe_name, "/python")) {
      *where = t->exe;
      return v;
    }
  return std::nullopt;
}

}  // namespace

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Ok:
      return "ok";
    case Verdict::Warn:
      return "warn";
    case Verdict::Fail:
      return "fail";
    case Verdict::Skip:
      return "skip";
  }
  return "?";
}

const Check* DoctorReport::find(const std::string& id) const {
  for (const auto& c : checks)
    if (c.id == id) return &c;
  return nullptr;
}

bool DoctorReport::any_fail() const {
  return std::any_of(checks.begin(), checks.end(), [](const Check& c) { return c.verdict == Verdict::Fail; });
}

Result<bool> validate_target(const std::string& proc_root, int pid) {
  procfs::ProcFs fs(proc_root);
  auto st = target_stat(fs, pid);
  if (!st) return make_error(st.error());
  return true;
}

Result<FsUsage> statvfs_usage(const std::string& path) {
  struct statvfs v {};
  if (statvfs(path.c_str(), &v) != 0)
    return make_error(fmt::format("statvfs {}: {}", path, std::strerror(errno)));
  return FsUsage{static_cast<uint64_t>(v.f_blocks) * v.f_frsize,
                 static_cast<uint64_t>(v.f_bavail) * v.f_frsize};
}

Result<Limit> parse_limit(std::string_view text, std::string_view row) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    pos = end == std::string_view::npos ? text.size() : end + 1;
    if (!starts_with(line, row) || line.size() == row.size() || line[row.size()] != ' ') continue;
    std::string_view rest = line.substr(row.size());
    std::vector<std::string> words;
    size_t i = 0;
    while (i < rest.size()) {
      while (i < rest.size() && rest[i] == ' ') ++i;
      size_t j = i;
      while (j < rest.size() && rest[j] != ' ') ++j;
      if (j > i) words.emplace_back(rest.substr(i, j - i));
      i = j;
    }
    if (words.size() < 2) return make_error(fmt::format("malformed limits row: {}", line));
    auto value = [](const std::string& w) -> Result<std::optional<uint64_t>> {
      if (w == "unlimited") return std::optional<uint64_t>{};
      auto v = parse_u64(w);
      if (!v) return make_error("bad limit value " + w);
      return std::optional<uint64_t>{*v};
    };
    auto soft = value(words[0]), hard = value(words[1]);
    if (!soft) return make_error(soft.error());
    if (!hard) return make_error(hard.error());
    return Limit{*soft, *hard};
  }
  return make_error(fmt::format("no \"{}\" row in limits", row));
}

std::optional<std::string> environ_value(std::string_view env, std::string_view key) {
  while (!env.empty()) {
    auto end = env.find('\0');
    std::string_view entry = env.substr(0, end);
    env = end == std::string_view::npos ? std::string_view() : env.substr(end + 1);
    if (entry.size() > key.size() && starts_with(entry, key) && entry[key.size()] == '=')
      return std::string(entry.substr(key.size() + 1));
  }
  return std::nullopt;
}

std::optional<std::pair<int, int>> parse_kernel_release(std::string_view release) {
  int major = 0, minor = 0;
  const char* b = release.data();
  const char* e = b + release.size();
  auto r1 = std::from_chars(b, e, major);
  if (r1.ec != std::errc() || r1.ptr == e || *r1.ptr != '.') return std::nullopt;
  auto r2 = std::from_chars(r1.ptr + 1, e, minor);
  if (r2.ec != std::errc()) return std::nullopt;
  return std::pair{major, minor};
}

std::optional<std::string> parse_torch_version_py(std::string_view text) {
  auto pos = text.find("__version__");
  if (pos == std::string_view::npos) return std::nullopt;
  auto q = text.find_first_of("'\"", pos);
  if (q == std::string_view::npos) return std::nullopt;
  auto q2 = text.find(text[q], q + 1);
  if (q2 == std::string_view::npos || q2 == q + 1) return std::nullopt;
  return std::string(text.substr(q + 1, q2 - q - 1));
}

Result<DoctorReport> run_doctor(const DoctorInputs& in) {
  std::optional<Target> target;
  if (in.pid != 0) {
    auto t = read_target(in);
    if (!t) return make_error(t.error());
    target = std::move(*t);
  }
  const Target* t = target ? &*target : nullptr;
  std::string self_limits, self_status, release;
  if (auto l = procfs::read_text_file(in.proc_root + "/self/limits")) self_limits = *l;
  if (auto s = procfs::read_text_file(in.proc_root + "/self/status")) self_status = *s;
  if (auto r = procfs::read_text_file(in.proc_root + "/sys/kernel/osrelease")) release = trim(*r);
  auto kernel = parse_kernel_release(release);

  DoctorReport r;
  r.pid = in.pid;
  std::string torch_where;
  auto torch_version = torch_version_of(in, t, &torch_where);

  r.checks.push_back(check_dev_shm(in, t));
  r.checks.push_back(check_sharing_strategy(t));
  r.checks.push_back(check_nofile(t, self_limits));
  r.checks.push_back(check_memlock(self_limits, kernel));
  check_environment(in, t, torch_version, r.checks);
  r.checks.push_back(check_start_method(t));
  r.checks.push_back(check_kernel(release));
  r.checks.push_back(check_btf(in));
  r.checks.push_back(check_privileges(self_status));
  r.checks.push_back(check_hooks(in.hooks));
  r.checks.push_back(make("hangtrace-version", Verdict::Ok, fmt::format("hangtrace {}", in.hangtrace_version),
                          "", {{"version", in.hangtrace_version}}));
  r.checks.push_back(in.libbpf_version.empty()
                         ? make("libbpf", Verdict::Skip, "libbpf version unknown")
                         : make("libbpf", Verdict::Ok, fmt::format("libbpf {}", in.libbpf_version), "",
                                {{"version", in.libbpf_version}}));
  if (torch_version)
    r.checks.push_back(make("torch-version", Verdict::Ok,
                            fmt::format("torch {} ({})", *torch_version, torch_where), "",
                            {{"version", *torch_version}, {"from", torch_where}}));
  else
    r.checks.push_back(make("torch-version", Verdict::Skip,
                            t ? "torch is not loaded in the target (no torch library mapped)"
                              : fmt::format("no --pid and no {}", in.default_torch_version_py)));
  std::string py_where;
  if (auto py = python_version_of(t, &py_where))
    r.checks.push_back(make("python-version", Verdict::Ok, fmt::format("python {} ({})", *py, py_where), "",
                            {{"version", *py}, {"from", py_where}}));
  else
    r.checks.push_back(make("python-version", Verdict::Skip,
                            t ? "the target is not a python process (no libpython mapped, exe not python*)"
                              : "no --pid: the job's python is unknown"));
  return r;
}

nlohmann::json report_to_json(const DoctorReport& r) {
  nlohmann::json checks = nlohmann::json::array();
  std::map<std::string, int> summary = {{"ok", 0}, {"warn", 0}, {"fail", 0}, {"skip", 0}};
  for (const auto& c : r.checks) {
    checks.push_back({{"id", c.id},
                      {"verdict", verdict_name(c.verdict)},
                      {"finding", c.finding},
                      {"fix", c.fix},
                      {"details", c.details}});
    summary[verdict_name(c.verdict)]++;
  }
  nlohmann::json j = {{"schema", "hangtrace.doctor/1"}, {"checks", checks}, {"summary", summary}};
  j["pid"] = r.pid ? nlohmann::json(r.pid) : nlohmann::json(nullptr);
  return j;
}

std::string render_text(const DoctorReport& r) {
  std::string out =
      r.pid ? fmt::format("hangtrace doctor: pid {}\n", r.pid) : "hangtrace doctor: this host\n";
  size_t width = 0;
  for (const auto& c : r.checks) width = std::max(width, c.id.size());
  int counts[4] = {0, 0, 0, 0};
  for (const auto& c : r.checks) {
    counts[static_cast<int>(c.verdict)]++;
    std::string verdict = verdict_name(c.verdict);
    for (auto& ch : verdict) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    out += fmt::format("{:<5} {:<{}}  {}\n", verdict, c.id, width, c.finding);
    if ((c.verdict == Verdict::Warn || c.verdict == Verdict::Fail) && !c.fix.empty())
      out += fmt::format("{:<5} {:<{}}  fix: {}\n", "", "", width, c.fix);
  }
  out += fmt::format("{} ok, {} warn, {} fail, {} skipped\n", counts[0], counts[1], counts[2], counts[3]);
  return out;
}

}  // namespace hangtrace::doctor
