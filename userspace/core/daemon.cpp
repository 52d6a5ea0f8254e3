#include "hangtrace/daemon.h"

#include "hangtrace/abi.h"
#include "hangtrace/profile.h"

#include "hangtrace/text.h"

#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <functional>
#include <sstream>

#include "hangtrace/abi.h"
#include "hangtrace/procfs.h"

namespace hangtrace::daemon {

using nlohmann::json;
using namespace hangtrace::procfs;

// ---- which processes are jobs ------------------------------------------------

Result<JobMatcher> JobMatcher::make(const JobSelectors& selectors) {
  JobMatcher m;
  m.selectors_ = selectors;
  for (const auto& p : selectors.cmdline_patterns) {
    auto compiled = Pattern::compile(p, "--match");
    if (!compiled) return make_error(compiled.error());
    m.patterns_.push_back(std::move(*compiled));
  }
  return m;
}

std::optional<std::string> JobMatcher::match(std::string_view cmdline, bool cmdline_cut,
                                             const std::string& cgroup_text,
                                             const std::vector<std::string>& fd_targets) const {
  if (!cmdline.empty())
    for (const auto& pattern : patterns_)
      if (pattern.search(cmdline))
        return fmt::format(
            "cmdline ~ '{}'{}", pattern.text(),
            cmdline_cut ? fmt::format(" (in its first {})", format_bytes(kMaxCmdlineBytes)) : "");
  if (!selectors_.cgroup_prefixes.empty()) {
    // "ID:CONTROLLERS:PATH" lines; v2 is "0::PATH".
    std::istringstream lines(cgroup_text);
    for (std::string line; std::getline(lines, line);) {
      size_t second = line.find(':', line.find(':') + 1);
      if (second == std::string::npos) continue;
      std::string path = line.substr(second + 1);
      for (const auto& prefix : selectors_.cgroup_prefixes)
        if (path.starts_with(prefix)) return fmt::format("cgroup {}", path);
    }
  }
  if (selectors_.gpu)
    for (const auto& t : fd_targets)
      if (t.starts_with("/dev/nvidia") && t != "/dev/nvidiactl" && t != "/dev/nvidia-uvm" &&
          t != "/dev/nvidia-uvm-tools" && t != "/dev/nvidia-modeset")
        return fmt::format("holds {}", t);
  return std::nullopt;
}

MatchInputs read_match_inputs(const ProcFs& proc, int pid, const JobMatcher& matcher) {
  MatchInputs in;
  if (matcher.wants_cgroup())
    if (auto c = proc.cgroup(pid)) in.cgroup = std::move(*c);
  if (matcher.wants_fds())
    if (auto list = proc.fds(pid))
      for (size_t i = 0; i < list->size() && i < kMaxMatchFds && in.device_fds.size() < kMaxMatchDeviceFds;
           ++i)
        if (auto target = proc.fd_link(pid, (*list)[i]); target && target->starts_with("/dev/nvidia"))
          in.device_fds.push_back(*target);
  return in;
}

Result<std::vector<ProcessEntry>> scan_processes(const std::string& proc_root, const JobMatcher& matcher) {
  const ProcFs proc(proc_root);
  auto pids = proc.pids();
  if (!pids) return make_error(pids.error());
  std::vector<ProcessEntry> out;
  out.reserve(pids->size());
  for (int pid : *pids) {
    auto stat = proc.stat(pid);
    if (!stat || stat->is_kernel_thread()) continue;
    ProcessEntry e;
    e.pid = pid;
    e.ppid = stat->ppid;
    e.start_ticks = stat->start_time_ticks;
    e.comm = stat->comm;
    auto cmdline = proc.cmdline_text(pid);
    if (!cmdline || cmdline->text.empty()) continue;  // gone, a zombie, or exiting
    const MatchInputs in = read_match_inputs(proc, pid, matcher);
    if (auto why = matcher.match(cmdline->text, cmdline->cut, in.cgroup, in.device_fds)) e.matched_by = *why;
    keep_cmdline(e, *cmdline);
    out.push_back(std::move(e));
  }
  return out;
}

void keep_cmdline(ProcessEntry& e, const BoundedText& read) {
  e.cmdline_digest = std::hash<std::string_view>{}(read.text) ^ (read.cut ? 0x9e3779b97f4a7c15ull : 0);
  e.cmdline_cut = read.cut;
  if (read.text.size() <= kMaxKeptCmdlineBytes && !read.cut)
    e.cmdline = read.text;
  else
    e.cmdline = read.text.substr(0, kMaxKeptCmdlineBytes) + " ...";
}

bool same_cmdline(const ProcessEntry& a, const ProcessEntry& b) {
  return a.cmdline_digest == b.cmdline_digest && a.cmdline == b.cmdline;
}

std::vector<int> job_roots(const std::vector<ProcessEntry>& processes) {
  std::map<int, const ProcessEntry*> by_pid;
  for (const auto& p : processes) by_pid[p.pid] = &p;
  auto ancestors = [&](const ProcessEntry& p, const std::function<bool(const ProcessEntry&)>& visit) {
    int guard = 0;
    for (auto it = by_pid.find(p.ppid); it != by_pid.end() && guard < 4096;
         it = by_pid.find(it->second->ppid), ++guard) {
      if (visit(*it->second)) return;
      if (it->second->ppid == it->second->pid) return;
    }
  };
  // A match is a job of its own unless an ancestor is the same program
  // (forked without exec: a DataLoader worker has its parent's command line).
  std::vector<const ProcessEntry*> candidates;
  for (const auto& p : processes) {
    if (p.matched_by.empty()) continue;
    bool forked_member = false;
    ancestors(p, [&](const ProcessEntry& a) {
      forked_member = !a.matched_by.empty() && same_cmdline(a, p);
      return forked_member;
    });
    if (!forked_member) candidates.push_back(&p);
  }
  // A launcher (torchrun, a shell running train.py) whose children are jobs
  // is not one: its main thread only waits for them.
  std::set<int> launchers;
  for (const ProcessEntry* c : candidates)
    ancestors(*c, [&](const ProcessEntry& a) {
      if (!a.matched_by.empty()) launchers.insert(a.pid);
      return false;
    });
  std::vector<int> roots;
  for (const ProcessEntry* c : candidates)
    if (!launchers.count(c->pid)) roots.push_back(c->pid);
  return roots;
}

std::vector<int> superseded_jobs(const std::map<int, std::set<int>>& tracked, const std::vector<int>& roots) {
  const std::set<int> now(roots.begin(), roots.end());
  std::vector<int> out;
  for (const auto& [tracked_root, pids] : tracked) {
    const int root = tracked_root;  // clang 14 cannot capture a structured binding
    if (!now.count(root) &&
        std::any_of(pids.begin(), pids.end(), [&](int pid) { return pid != root && now.count(pid); }))
      out.push_back(root);
  }
  return out;
}

ChildIndex children_of(const std::vector<ProcessEntry>& processes) {
  ChildIndex children;
  for (const auto& p : processes) children.insert({p.ppid, p.pid});
  return children;
}

std::vector<int> descendants_of(int root, const std::vector<ProcessEntry>& processes) {
  return descendants_of(root, children_of(processes));
}

std::vector<int> descendants_of(int root, const ChildIndex& children) {
  std::vector<int> out, todo = {root};
  std::set<int> seen = {root};
  while (!todo.empty()) {
    int pid = todo.back();
    todo.pop_back();
    auto [lo, hi] = children.equal_range(pid);
    for (auto it = lo; it != hi; ++it)
      if (seen.insert(it->second).second) {
        out.push_back(it->second);
        todo.push_back(it->second);
      }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---- incidents -------------------------------------------------------------------

std::optional<std::string> exit_incident(int raw_status) {
  // The kernel's wait status: exit code << 8 | terminating signal.
  int sig = WIFSIGNALED(raw_status) ? WTERMSIG(raw_status) : 0;
  int code = WIFEXITED(raw_status) ? WEXITSTATUS(raw_status) : 0;
  if (sig == SIGBUS) return "sigbus";
  if (sig == 0) return code != 0 ? std::optional<std::string>("abnormal-exit") : std::nullopt;
  if (sig == SIGHUP || sig == SIGINT || sig == SIGKILL || sig == SIGTERM) return std::nullopt;
  return "abnormal-exit";  // SIGSEGV, SIGABRT, SIGILL, SIGFPE, ...
}

// ---- roles and wait kinds -------------------------------------------------------

const char* role_name(bool is_job_root, bool main_thread) {
  if (!is_job_root) return "worker";
  return main_thread ? "main_thread" : "main_process";
}

const char* wait_kind_name(uint8_t kind) {
  switch (kind) {
    case HT_WAIT_FUTEX:
      return "futex";
    case HT_WAIT_IO:
      return "io";
    case HT_WAIT_NET:
      return "net";
    case HT_WAIT_POLL:
      return "poll";
    case HT_WAIT_CHILD:
      return "child";
    case HT_WAIT_SLEEP:
      return "sleep";
    default:
      return "other";
  }
}

const char* sampled_main_cause(bool on_cpu, bool in_syscall, uint8_t wait_kind, bool timed, uint32_t fd_kind,
                               bool has_workers) {
  if (on_cpu) return stall_cause_name(StallCause::OnCpu);
  if (!in_syscall) return stall_cause_name(StallCause::Other);
  if (fd_kind == HT_OBJ_FILE) return stall_cause_name(StallCause::StorageIo);
  if (fd_kind == HT_OBJ_SOCKET || wait_kind == HT_WAIT_NET) return stall_cause_name(StallCause::Network);
  switch (wait_kind) {
    case HT_WAIT_SLEEP:
      return stall_cause_name(StallCause::Sleep);
    case HT_WAIT_POLL:
    case HT_WAIT_IO:
      if (has_workers && (fd_kind == HT_OBJ_PIPE || fd_kind == HT_OBJ_UNKNOWN))
        return stall_cause_name(StallCause::DataLoader);
      return stall_cause_name(timed ? StallCause::Sleep : StallCause::Other);
    case HT_WAIT_FUTEX:
      return stall_cause_name(StallCause::Lock);
    default:
      return stall_cause_name(StallCause::Other);
  }
}

const std::vector<double>& exported_bucket_bounds() {
  // 4^k us for k = 1..15: 4 us ... ~1074 s (bucket k covers in-kernel log2 buckets < 2k).
  static const std::vector<double> bounds = [] {
    std::vector<double> b;
    for (int k = 1; k <= 15; ++k) b.push_back(static_cast<double>(1ull << (2 * k)) * 1e-6);
    return b;
  }();
  return bounds;
}

std::vector<double> fold_log2_buckets(const uint64_t* counts, size_t n) {
  const size_t exported = exported_bucket_bounds().size();
  std::vector<double> out(exported + 1, 0.0);
  for (size_t i = 0; i < n; ++i) {
    // log2 bucket i holds [2^i, 2^(i+1)) us: under the bound 4^k = 2^(2k) when i + 1 <= 2k.
    size_t k = (i + 2) / 2;  // the smallest k with 2k >= i + 1
    size_t slot = k >= 1 && k <= exported ? k - 1 : exported;
    out[slot] += static_cast<double>(counts[i]);
  }
  return out;
}

// ---- the flight recorder --------------------------------------------------------

void FlightRecorder::add(uint64_t ts_ns, const void* data, size_t size) {
  records_.push_back({ts_ns, std::string(static_cast<const char*>(data), size)});
  bytes_ += size;
  while (!records_.empty() && (records_.size() > max_records_ || bytes_ > max_bytes_)) {
    bytes_ -= records_.front().raw.size();
    records_.pop_front();
    ++evicted_;
  }
}

void FlightRecorder::prune(uint64_t now_ns) {
  while (!records_.empty() && now_ns > horizon_ns_ && records_.front().ts_ns < now_ns - horizon_ns_) {
    bytes_ -= records_.front().raw.size();
    records_.pop_front();
  }
}

LiveObservation FlightRecorder::replay(uint64_t start_ns, uint64_t end_ns) const {
  Aggregator agg;
  for (const auto& r : records_) {
    if (agg.add_raw(r.raw.data(), r.raw.size()) != Aggregator::Raw::NotHot) continue;
    if (auto e = decode_event(r.raw.data(), r.raw.size())) agg.add(*e);
  }
  if (!records_.empty()) start_ns = std::min(start_ns, records_.front().ts_ns);
  return agg.finish(start_ns, end_ns, records_.size(), 0);
}

json event_to_json(const TraceEvent& e, double offset_s) {
  json j = {{"type", event_type_name(e.type)},
            {"ts_ns", e.ts_ns},
            {"unix_time", static_cast<double>(e.ts_ns) / 1e9 + offset_s},
            {"pid", e.tgid},
            {"tid", e.tid},
            {"comm", e.comm}};
  switch (e.type) {
    case HT_EV_PROC_FORK:
      j["child_pid"] = e.child_tgid;
      break;
    case HT_EV_PROC_EXIT:
      j["exit_code"] = e.exit_code >> 8;
      j["signal"] = WTERMSIG(e.exit_code);
      break;
    case HT_EV_SIGNAL:
      j["signal"] = e.sig;
      j["si_code"] = e.si_code;
      j["sender_pid"] = e.sender_tgid;
      j["sender_comm"] = e.sender_comm;
      break;
    case HT_EV_OOM_VICTIM:
      j["anon_rss_kb"] = e.anon_rss_kb;
      j["file_rss_kb"] = e.file_rss_kb;
      j["shmem_rss_kb"] = e.shmem_rss_kb;
      if (e.memcg_limit_bytes) j["memcg_limit_bytes"] = e.memcg_limit_bytes;
      break;
    case HT_EV_FUTEX_WAIT:
      j["uaddr"] = fmt::format("{:#x}", e.uaddr);
      j["duration_s"] = static_cast<double>(e.duration_ns) / 1e9;
      j["ret"] = e.ret;
      break;
    case HT_EV_SYSCALL_BLOCK:
      j["nr"] = e.nr;
      j["fd"] = e.fd;
      j["duration_s"] = static_cast<double>(e.duration_ns) / 1e9;
      j["ret"] = e.ret;
      break;
    case HT_EV_SHM:
      j["op"] = shm_op_name(e.shm_op);
      j["name"] = e.name;
      if (e.fs_size) {
        j["fs_used"] = e.fs_used;
        j["fs_size"] = e.fs_size;
      }
      break;
    case HT_EV_TCP_STATE:
    case HT_EV_TCP_RETRANSMIT:
      j["local"] = e.local;
      j["remote"] = e.remote;
      j["state"] = hangtrace::tcp_state_name(e.new_state);
      break;
    case HT_EV_RSS:
      j["rss_bytes"] = e.rss_bytes;
      break;
    case HT_EV_GPU_CALL:
      j["duration_s"] = static_cast<double>(e.duration_ns) / 1e9;
      break;
    default:
      break;
  }
  return j;
}

json FlightRecorder::to_json(double offset_s) const {
  json events = json::array();
  for (const auto& r : records_)
    if (auto e = decode_event(r.raw.data(), r.raw.size())) events.push_back(event_to_json(*e, offset_s));
  return {{"horizon_s", static_cast<double>(horizon_ns_) / 1e9},
          {"records", records_.size()},
          {"evicted", evicted_},
          {"events", std::move(events)}};
}

// ---- the watchdog ----------------------------------------------------------------

std::string ProgressWatch::update(const ProgressSample& s) {
  if (!started_) {
    started_ = true;
    last_ = s;
    last_progress_ns_ = s.now_ns;
    last_signal_ = "tracking started";
    return "";
  }
  std::string moved;
  if (s.wakeups_from_job > last_.wakeups_from_job)
    moved = "wakeups from the job";
  else if (s.gpu_launches > last_.gpu_launches)
    moved = "GPU launches";
  else if (s.main_woken_sampled > last_.main_woken_sampled)
    moved = "main thread woken";
  else if (!s.python_frames.empty() && !last_.python_frames.empty() && s.python_frames != last_.python_frames)
    moved = "Python frames";
  // A frame that could not be read this time is no evidence: keep the last one.
  std::string frames = s.python_frames.empty() ? last_.python_frames : s.python_frames;
  last_ = s;
  last_.python_frames = frames;
  if (!moved.empty()) {
    last_progress_ns_ = s.now_ns;
    last_signal_ = moved;
  }
  return moved;
}

std::string python_frames_fingerprint(const std::vector<UserFrame>& stack) {
  std::string out;
  for (const auto& f : stack) {
    if (f.kind != UserFrame::Kind::Python) continue;
    out += fmt::format("{}:{} {}\n", f.file, f.line, f.function);
  }
  return out;
}

}  // namespace hangtrace::daemon
