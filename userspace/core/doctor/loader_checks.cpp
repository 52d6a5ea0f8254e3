// The /dev/shm and DataLoader checks: /dev/shm against workers x
// prefetch_factor x batch bytes, the tensor sharing strategy, open files
// against ulimit -n, the workers' start method.
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "hangtrace/text.h"
#include "internal.h"

namespace hangtrace::doctor {
namespace detail {
namespace {

constexpr uint64_t kDockerShm = 64 * kMiB;  // docker run without --shm-size / --ipc=host
constexpr int kDefaultPrefetch = 2;         // DataLoader(prefetch_factor=2)
constexpr uint64_t kNofileLow = 4096;       // below this, file_descriptor sharing runs out early

std::string pids_text(const std::vector<int>& pids) {
  std::string s;
  for (int p : pids) s += (s.empty() ? "" : ",") + std::to_string(p);
  return s;
}

std::string limit_text(const std::optional<uint64_t>& v) { return v ? std::to_string(*v) : "unlimited"; }

}  // namespace

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

}  // namespace detail

Result<FsUsage> statvfs_usage(const std::string& path) {
  struct statvfs v {};
  if (statvfs(path.c_str(), &v) != 0)
    return make_error(fmt::format("statvfs {}: {}", path, std::strerror(errno)));
  return FsUsage{static_cast<uint64_t>(v.f_blocks) * v.f_frsize,
                 static_cast<uint64_t>(v.f_bavail) * v.f_frsize};
}

}  // namespace hangtrace::doctor
