// Snapshot -> wait-for graph: what each thread is doing, what it waits on,
// and the finishing pass over the objects (graph_builder.h).
#include <poll.h>

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "graph_builder.h"
#include "hangtrace/stacks.h"
#include "hangtrace/text.h"

namespace hangtrace {

const char* object_kind_name(ObjectKind k) {
  switch (k) {
    case ObjectKind::Futex:
      return "futex";
    case ObjectKind::Pipe:
      return "pipe";
    case ObjectKind::UnixSocket:
      return "unix-socket";
    case ObjectKind::TcpSocket:
      return "tcp-socket";
    case ObjectKind::UdpSocket:
      return "udp-socket";
    case ObjectKind::Socket:
      return "socket";
    case ObjectKind::EventFd:
      return "eventfd";
    case ObjectKind::File:
      return "file";
    case ObjectKind::Child:
      return "child";
    case ObjectKind::Gil:
      return "gil";
    case ObjectKind::FileLock:
      return "file-lock";
    case ObjectKind::Signal:
      return "signal";
    case ObjectKind::Unknown:
      return "unknown";
  }
  return "unknown";
}

const char* activity_name(Activity a) {
  switch (a) {
    case Activity::Running:
      return "running";
    case Activity::Blocked:
      return "blocked";
    case Activity::TimedWait:
      return "timed-wait";
    case Activity::Sleeping:
      return "sleeping";
    case Activity::DiskWait:
      return "disk-wait";
    case Activity::Stopped:
      return "stopped";
    case Activity::Dead:
      return "dead";
    case Activity::Unknown:
      return "unknown";
  }
  return "unknown";
}

WaitGraph build_wait_graph(const Snapshot& snapshot) { return graph::GraphBuilder(snapshot).build(); }

bool is_poll(const PollWatch& w) {
  if (w.sleeps < 3 || w.samples <= 0 || w.watched_s <= 0) return false;
  const bool mostly_asleep = w.asleep * 5 >= w.samples * 4;
  const bool almost_no_cpu = static_cast<double>(w.cpu_ns) < 0.05 * w.watched_s * 1e9;
  return mostly_asleep && almost_no_cpu;
}

namespace graph {

namespace {
// A wait's summary names the first of its objects (a poll over thousands
// of fds is one line, not a page).
constexpr size_t kMaxSummaryLabels = 16;
std::string listed_labels(const std::vector<std::string>& labels) {
  if (labels.size() <= kMaxSummaryLabels) return fmt::format("{}", fmt::join(labels, ", "));
  return fmt::format("{} and {} more",
                     fmt::join(labels.begin(), labels.begin() + static_cast<long>(kMaxSummaryLabels), ", "),
                     labels.size() - kMaxSummaryLabels);
}
}  // namespace

GraphBuilder::GraphBuilder(const Snapshot& s) : snap_(s) {
  for (const auto& p : snap_.processes) {
    for (const auto& t : p.threads) graph_.tid_to_pid[t.tid] = p.pid;
    if (!alive(p)) continue;
    std::vector<int> live;
    for (const auto& t : p.threads)
      if (alive(t)) live.push_back(t.tid);
    std::sort(live.begin(), live.end());
    live.erase(std::unique(live.begin(), live.end()), live.end());
    if (!live.empty()) graph_.live_threads[p.pid] = std::move(live);
  }
}

WaitGraph GraphBuilder::build() {
  for (const auto& p : snap_.processes)
    for (const auto& t : p.threads) classify(p, t);
  finish_objects();
  return std::move(graph_);
}

WaitObject& GraphBuilder::object(const std::string& id, ObjectKind kind, const std::string& label,
                                 const std::string& name) {
  auto [it, inserted] = graph_.objects.try_emplace(id);
  if (inserted) {
    it->second.id = id;
    it->second.kind = kind;
    it->second.label = label;
    it->second.name = name.empty() ? id : name;
  }
  return it->second;
}

void GraphBuilder::add_releaser_process(WaitObject& o, int pid) {
  if (graph_.live_threads.count(pid)) o.releaser_processes.push_back({pid, {}, 0});
  o.holder_pids.push_back(pid);
}

std::string GraphBuilder::process_label(int pid) const {
  const ProcessInfo* p = snap_.process(pid);
  return p ? fmt::format("{} ({})", pid, p->comm) : std::to_string(pid);
}

// ---- per thread ---------------------------------------------------------------
void GraphBuilder::classify(const ProcessInfo& p, const ThreadInfo& t) {
  ThreadWait w;
  w.tid = t.tid;
  w.pid = p.pid;
  if (t.kernel) {
    for (const auto& fr : t.kernel->stack)
      if (!fr.symbol.empty()) w.kernel_stack.push_back(fr.symbol.substr(0, fr.symbol.find('+')));
    if (!t.kernel->on_cpu) w.blocked_s = static_cast<double>(t.kernel->off_cpu_ns) / 1e9;
  }
  if (t.progress_sampled) {
    uint64_t cpu = t.cpu_ns_end >= t.cpu_ns_start ? t.cpu_ns_end - t.cpu_ns_start : 0;
    w.progressed = cpu > progress_cpu_ns_ || t.io_bytes_end != t.io_bytes_start;
    w.woke = t.runs_at_read && t.runs_end != *t.runs_at_read;
  }
  const SyscallDesc desc = describe_syscall(t.syscall.nr);
  if (t.syscall.mode == SyscallState::Mode::InSyscall) {
    w.syscall_text = format_syscall(t.syscall.nr, t.syscall.args, t.memory.poll_fds);
    w.wait_class = desc.wait;
  }
  w.timeout_s = t.memory.timeout_s;
  if (t.syscall.nr == HT_NR_poll && static_cast<int>(t.syscall.args[2]) >= 0 && !w.timeout_s)
    w.timeout_s = static_cast<int>(t.syscall.args[2]) / 1000.0;

  switch (t.state) {
    case 'R':
      w.activity = Activity::Running;
      break;
    case 'D':
      w.activity = Activity::DiskWait;
      break;
    case 'T':
    case 't':
      w.activity = Activity::Stopped;
      break;
    case 'Z':
    case 'X':
      w.activity = Activity::Dead;
      break;
    default:  // 'S', 'I': the syscall says what it waits for
      w.activity = Activity::Unknown;
      break;
  }
  // A GIL waiter whose 5 ms timed wait just ran out reads R (woken, not yet
  // back in take_gil's next wait): between two waits on the same holder, it
  // is still waiting for it.
  if (w.activity == Activity::Running && t.syscall.mode == SyscallState::Mode::InSyscall && !t.holds_gil &&
      desc.wait == WaitClass::Futex && is_gil_wait(p, t))
    w.activity = Activity::Unknown;
  if (!alive(p)) w.activity = Activity::Dead;
  // A frozen cgroup's tasks read D (v1) or S (v2) but run nothing until thawed.
  if (!p.frozen_cgroup.empty() && w.activity != Activity::Dead) {
    w.activity = Activity::Stopped;
    w.summary = fmt::format("frozen (cgroup {})", p.frozen_cgroup);
  }
  if (w.activity == Activity::DiskWait ||
      (w.activity == Activity::Unknown && t.syscall.mode == SyscallState::Mode::InSyscall)) {
    if (fs_wait(p, t, desc, w)) {
      graph_.threads[t.tid] = std::move(w);
      return;
    }
  }
  if (w.activity == Activity::Unknown && t.syscall.mode == SyscallState::Mode::Running)
    w.activity = Activity::Running;
  // Under load a GIL waiter whose timed wait ran out sits runnable in the
  // run queue, out of any syscall: it reads R and "running". One that used
  // no CPU over the window while another thread holds the GIL blocked in a
  // syscall is not running Python (it has no GIL) nor C code (no CPU): it
  // waits for the GIL between two of its waits.
  if (w.activity == Activity::Running && t.syscall.mode != SyscallState::Mode::InSyscall && p.is_python &&
      !t.holds_gil && t.progress_sampled && !w.progressed && gil_held_by_blocked_thread(p)) {
    w.activity = Activity::Blocked;
    w.objects = {gil_object(p, w)};
    graph_.objects[w.objects.front()].waiters.push_back(t.tid);
    w.summary += " (read runnable between two of its timed waits, using no CPU)";
    graph_.threads[t.tid] = std::move(w);
    return;
  }
  if (w.activity == Activity::Unknown && t.syscall.mode == SyscallState::Mode::InSyscall)
    resolve_wait(p, t, desc, w);
  mark_person_input(p, t, w);
  if (w.summary.empty()) w.summary = activity_name(w.activity);
  graph_.threads[t.tid] = std::move(w);
}

void GraphBuilder::mark_person_input(const ProcessInfo& p, const ThreadInfo& t, ThreadWait& w) {
  if ((w.activity != Activity::Blocked && w.activity != Activity::TimedWait) || w.objects.empty()) return;
  const std::string_view console = interactive_console(t);
  const std::vector<int> fds = directly_waited_fds(t.syscall, t.memory);
  size_t input_fds = 0;
  for (int fd : fds) {
    const FdEntry* f = find_fd(p, fd);
    const bool terminal = f && is_terminal_path(f->link);
    if (!terminal && !(fd == 0 && !console.empty())) continue;
    ++input_fds;
    if (!w.input_fd) {
      w.input_fd = fd;
      w.input_terminal = terminal;
    }
  }
  // A wait on input alone (not a poll that also watches a socket): a
  // person ends it, whatever holds the other end of the pipe it may be.
  if (!w.input_fd || input_fds != fds.size()) return;
  const std::string note =
      console.empty()
          ? "a terminal: a person types what ends this wait"
          : fmt::format("read by {} (an interactive debugger): a person types what ends this wait", console);
  for (const auto& id : w.objects) {
    WaitObject& o = graph_.objects[id];
    o.external = true;
    o.released_by_person = true;
    if (std::find(o.notes.begin(), o.notes.end(), note) == o.notes.end()) o.notes.push_back(note);
  }
}

void GraphBuilder::resolve_wait(const ProcessInfo& p, const ThreadInfo& t, const SyscallDesc& desc,
                                ThreadWait& w) {
  // A GIL wait retries every 5 ms (the switch interval) until the holder
  // lets go: it is blocked on the holder, not a timed wait that may give up.
  if (desc.wait == WaitClass::Futex && is_gil_wait(p, t)) {
    w.activity = Activity::Blocked;
    w.objects = {gil_object(p, w)};
    graph_.objects[w.objects.front()].waiters.push_back(t.tid);
    return;
  }
  const bool timed = w.timeout_s.has_value();
  if (timed && *w.timeout_s <= 0) {
    w.activity = Activity::Running;  // a non-blocking call, about to return
    return;
  }
  auto blocked = [&] { w.activity = timed ? Activity::TimedWait : Activity::Blocked; };
  extra_objects_.clear();
  std::string id;
  // select/poll on no fds is a sleep (time.sleep before CPython 3.11).
  const WaitClass wait = only_sleeps(t.syscall.nr, t.syscall.args) ? WaitClass::Sleep : desc.wait;
  switch (wait) {
    case WaitClass::Futex:
      id = futex_object(p, t, w);
      if (!id.empty()) blocked();
      break;
    case WaitClass::FdRead:
    case WaitClass::FdWrite:
    case WaitClass::Accept:
    case WaitClass::Connect: {
      bool want_read = desc.wait != WaitClass::FdWrite && desc.wait != WaitClass::Connect;
      id = fd_object(p, static_cast<int>(t.syscall.args[0]), want_read, w);
      blocked();
      const WaitObject& o = graph_.objects[id];
      // The standard streams by name: "writes on stdout (pipe:[5] (write end))".
      static constexpr const char* kStreams[] = {"stdin", "stdout", "stderr"};
      const uint64_t fd = t.syscall.args[0];
      w.summary = fmt::format("{} on {}",
                              desc.wait == WaitClass::FdWrite   ? "writes"
                              : desc.wait == WaitClass::Accept  ? "accepts"
                              : desc.wait == WaitClass::Connect ? "connects"
                                                                : "reads",
                              fd < 3 ? fmt::format("{} ({})", kStreams[fd], o.label) : o.label);
      break;
    }
    case WaitClass::Poll:
    case WaitClass::Select: {
      std::vector<std::string> labels;
      for (const auto& [fd, events] : t.memory.poll_fds) {
        if (fd < 0) continue;
        std::string sub = fd_object(p, fd, (events & (POLLOUT)) == 0, w);
        if (!sub.empty()) {
          w.objects.push_back(sub);
          labels.push_back(graph_.objects[sub].label);
        }
      }
      for (auto& e : extra_objects_) w.objects.push_back(e);
      blocked();
      w.summary = labels.empty() ? fmt::format("{} on unknown fds", desc.name)
                                 : fmt::format("{} on {}", desc.name, listed_labels(labels));
      break;
    }
    case WaitClass::Epoll: {
      const FdEntry* ep = find_fd(p, static_cast<int>(t.syscall.args[0]));
      std::vector<std::string> labels;
      if (ep) {
        for (auto& sub : epoll_objects(p, *ep, w, 0)) {
          w.objects.push_back(sub);
          labels.push_back(graph_.objects[sub].label);
        }
        for (auto& e : extra_objects_) w.objects.push_back(e);
      }
      blocked();
      w.summary = fmt::format("epoll_wait on {}", labels.empty() ? "nothing known" : listed_labels(labels));
      break;
    }
    case WaitClass::ChildWait:
      id = child_object(p, t);
      blocked();
      w.summary = "waits for " + graph_.objects[id].label;
      break;
    case WaitClass::FileLock:
      if (!waits_for_file_lock(t.syscall.nr, t.syscall.args)) {
        w.activity = Activity::Running;  // F_GETFL, F_SETLK, LOCK_NB: returns at once
        break;
      }
      id = file_lock_object(p, t);
      blocked();
      w.summary = "waits to lock " + graph_.objects[id].label;
      break;
    case WaitClass::Sleep:
      w.activity = Activity::Sleeping;
      w.summary = w.timeout_s ? fmt::format("sleeps {}", format_short_duration(*w.timeout_s)) : "sleeps";
      if (t.poll && is_poll(*t.poll)) {
        w.poll_period_s = t.poll->watched_s / static_cast<double>(t.poll->sleeps);
        w.poll_watched_s = t.poll->watched_s;
        std::vector<std::string> labels;
        for (int fd : t.poll->lock_fds) {
          const std::string lock = polled_lock_object(p, fd);
          w.objects.push_back(lock);
          labels.push_back(graph_.objects[lock].label);
        }
        w.summary =
            fmt::format("polls: sleeps, wakes and sleeps again every ~{} (watched {})",
                        format_short_duration(*w.poll_period_s), format_short_duration(w.poll_watched_s));
        if (!labels.empty())
          w.summary += fmt::format(", while {} is held by another process", listed_labels(labels));
      }
      break;
    case WaitClass::Pause: {
      id = signal_object("signal", "a signal");
      blocked();
      w.summary = "waits for a signal";
      // Its children's exits among them: SIGCHLD has a handler and is not
      // blocked (/proc status SigCgt, SigBlk -- in sigsuspend, its mask).
      if (t.tid == p.pid && p.woken_by_child_exit()) {
        if (std::string exit = child_exit_object(p); !exit.empty()) {
          w.objects.push_back(exit);
          w.summary = "waits for a signal: a child's exit (SIGCHLD) or another";
        }
      }
      break;
    }
    default:
      w.activity = Activity::Unknown;
      w.summary = fmt::format("in {}", desc.name);
      break;
  }
  if (!id.empty()) w.objects.insert(w.objects.begin(), id);
  // Dedupe (poll on both ends of the same pipe, ...).
  std::set<std::string> seen;
  std::vector<std::string> uniq;
  for (auto& o : w.objects)
    if (seen.insert(o).second) uniq.push_back(o);
  w.objects = std::move(uniq);
  for (const auto& o : w.objects) graph_.objects[o].waiters.push_back(t.tid);
  if (timed && w.activity == Activity::TimedWait)
    w.summary += fmt::format(" (timeout {:.3g} s)", *w.timeout_s);
}

// ---- finishing pass -------------------------------------------------------------
void GraphBuilder::finish_objects() {
  for (auto& [id, o] : graph_.objects)
    if (o.futex) resolve_futex_releasers(o);
  for (auto& [id, o] : graph_.objects) {
    if (o.released_by_person) {
      o.releasers.clear();
      o.releaser_processes.clear();
    }
    // A waiter cannot release what it waits on; neither can a dead thread.
    std::set<int> waiters(o.waiters.begin(), o.waiters.end());
    std::map<int, ReleaserProcess> processes;
    for (const auto& rp : o.releaser_processes) processes.try_emplace(rp.pid, ReleaserProcess{rp.pid, {}, 0});
    // By the waiters, not the process's threads: n objects of one process
    // would read its n threads each.
    for (int tid : waiters) {
      auto rp = processes.find(graph_.tid_to_pid[tid]);
      if (rp == processes.end()) continue;
      const std::vector<int>& live = graph_.live_threads.at(rp->first);
      if (std::binary_search(live.begin(), live.end(), tid))
        rp->second.except.push_back(tid);  // ascending: a set
    }
    for (auto it = processes.begin(); it != processes.end();) {
      it->second.threads = graph_.live_threads.at(it->first).size() - it->second.except.size();
      // A process whose every live thread waits on it releases nothing.
      it = it->second.threads ? std::next(it) : processes.erase(it);
    }
    std::set<int> rel;
    for (int tid : o.releasers)
      if (!waiters.count(tid) && !processes.count(graph_.tid_to_pid[tid])) rel.insert(tid);
    o.releasers.assign(rel.begin(), rel.end());
    o.releaser_processes.clear();
    for (auto& [pid, rp] : processes) o.releaser_processes.push_back(std::move(rp));
    std::set<int> hp(o.holder_pids.begin(), o.holder_pids.end());
    o.holder_pids.assign(hp.begin(), hp.end());
    std::set<int> waiter_pids;
    for (int tid : o.waiters) waiter_pids.insert(graph_.tid_to_pid[tid]);
    // Held (the other end, or the mapping) by the waiters' own processes
    // alone, whether or not another of their threads could release it.
    o.only_self_holders = releaser_count(o) > 0 || !o.holder_pids.empty();
    for (int tid : o.releasers)
      if (!waiter_pids.count(graph_.tid_to_pid[tid])) o.only_self_holders = false;
    for (const auto& rp : o.releaser_processes)
      if (!waiter_pids.count(rp.pid)) o.only_self_holders = false;
    for (int pid : o.holder_pids)
      if (!waiter_pids.count(pid)) o.only_self_holders = false;
    if (o.kind == ObjectKind::Gil) finish_gil(o);
  }
}

}  // namespace graph
}  // namespace hangtrace
