// The stall profile's CPU accounting: each traced thread's schedstat (time on
// a CPU, time waiting on a runqueue for one) read when the window opens, now
// and then while it runs (a thread that dies keeps its last reading), and
// when it closes. Bounded: at most kMaxThreadTimes threads. And the mounts of
// the files waited on, read when it closes.
#include "hangtrace/profile.h"

#include "hangtrace/procfs.h"

namespace hangtrace {

void read_thread_times(const procfs::ProcFs& proc, const std::set<int>& tgids, uint64_t now_ns,
                       bool window_start, std::map<int, ThreadTimes>& times,
                       std::map<int, procfs::Schedstat>& first) {
  for (int pid : tgids) {
    auto tids = proc.tids(pid);
    if (!tids) continue;
    for (int tid : *tids) {
      if (times.size() >= kMaxThreadTimes && !times.count(tid)) return;
      auto stat = proc.thread_schedstat_fields(pid, tid);
      if (!stat) continue;
      auto [it, fresh] = first.emplace(tid, *stat);
      ThreadTimes& t = times[tid];
      if (fresh) {
        t.pid = pid;
        t.first_ns = now_ns;
        t.seen_at_start = window_start;
        if (auto st = proc.thread_stat(pid, tid)) t.comm = st->comm;
        // A thread born in the window ran only in it: all of its time counts.
        if (!window_start) it->second = procfs::Schedstat{};
      }
      if (t.pid != pid) continue;  // a tid reused by another process: keep the first
      t.last_ns = now_ns;
      const procfs::Schedstat& f = it->second;
      t.on_cpu_ns = stat->run_ns >= f.run_ns ? stat->run_ns - f.run_ns : 0;
      t.runnable_ns = stat->run_delay_ns >= f.run_delay_ns ? stat->run_delay_ns - f.run_delay_ns : 0;
    }
  }
}

void read_file_mounts(const procfs::ProcFs& proc, LiveObservation& o) {
  std::map<int, std::set<uint32_t>> wanted;
  for (const auto& [tid, totals] : o.wait_totals)
    for (const auto& t : totals)
      if (t.mnt_id) wanted[t.pid].insert(t.mnt_id);
  for (const auto& [pid, ids] : wanted) {
    auto table = proc.mountinfo(pid);
    if (!table) continue;
    for (const auto& m : table->mounts)
      if (ids.count(static_cast<uint32_t>(m.mount_id)))
        o.file_mounts[{pid, static_cast<uint32_t>(m.mount_id)}] = m;
  }
}

}  // namespace hangtrace
