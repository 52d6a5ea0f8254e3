#include "hangtrace/wait_sampler.h"

#include <cerrno>
#include <cstring>

#include "hangtrace/abi.h"
#include "hangtrace/syscalls.h"

namespace hangtrace {

SampledCall classify_sampled_call(int64_t nr, const uint64_t args[6]) {
  SampledCall c;
  // The wait kind the syscall table gives the call, as the BPF histograms
  // count it (hangtrace/syscall_dispatch.h).
  SyscallDesc d = describe_syscall(nr);
  if (d.wait_kind < 0) return c;  // not a wait the histograms have a kind for
  if (nr == HT_NR_futex && !decode_futex_op(static_cast<uint32_t>(args[1])).is_wait) return c;
  c.wait_kind = static_cast<uint8_t>(d.wait_kind);
  if (wait_class_takes_fd(d.wait)) c.fd = static_cast<int>(args[0]);
  c.is_wait = true;
  if (c.wait_kind == HT_WAIT_SLEEP) {
    c.timed = true;
    return c;
  }
  TimeoutArg t = timeout_arg(nr, args);
  if (t.arg_index >= 0 && t.arg_index < 6) {
    uint64_t v = args[t.arg_index];
    if (t.kind == TimeoutArg::Kind::Milliseconds)
      c.timed = static_cast<int32_t>(v) >= 0;
    else if (t.kind != TimeoutArg::Kind::None)
      c.timed = v != 0;
  }
  return c;
}

WaitSampler::Pass WaitSampler::update(uint64_t now_ns, const std::vector<TaskBrief>& tasks) {
  Pass pass;
  std::map<int, Thread> next;
  auto end_wait = [&](Thread& was, bool woken) {
    was.wait.woken = woken;
    if (woken && !was.wait.timed) pass.woken_from_untimed[was.wait.tid]++;
    if (was.wait.duration_ns() >= report_after_ns_) pass.ended.push_back(was.wait);
  };
  for (const TaskBrief& t : tasks) {
    SampledCall call;
    if (!t.on_cpu && t.syscall_nr >= 0) call = classify_sampled_call(t.syscall_nr, t.syscall_args);
    auto before = threads_.find(t.tid);
    Thread now;
    now.nvcsw = t.nvcsw;
    if (before != threads_.end()) {
      Thread& was = before->second;
      if (was.waiting && call.is_wait && t.nvcsw == was.nvcsw && t.syscall_nr == was.wait.nr) {
        // Not switched out again since: the same wait, still going.
        now.waiting = true;
        now.wait = was.wait;
        now.wait.seen_until_ns = now_ns;
        next.emplace(t.tid, std::move(now));
        continue;
      }
      // A thread seen waiting has either run since (its switch count moved)
      // or is in another call now; either way that wait is over.
      if (was.waiting) end_wait(was, t.nvcsw != was.nvcsw);
    }
    if (call.is_wait) {
      now.waiting = true;
      SampledWait& w = now.wait;
      w.tid = t.tid;
      w.tgid = t.tgid;
      w.wait_kind = call.wait_kind;
      w.timed = call.timed;
      w.nr = t.syscall_nr;
      std::memcpy(w.args, t.syscall_args, sizeof w.args);
      if (call.fd >= 0 && fd_info_) {
        w.fd = fd_info_(t.tgid, call.fd);
        if (w.wait_kind == HT_WAIT_IO) w.wait_kind = w.fd.wait_kind;
      }
      w.start_ns = now_ns > t.off_cpu_ns ? now_ns - t.off_cpu_ns : 0;
      w.seen_until_ns = now_ns;
    }
    next.emplace(t.tid, std::move(now));
  }
  // Threads no pass sees any more have exited.
  for (auto& [tid, was] : threads_)
    if (!next.count(tid) && was.waiting) end_wait(was, false);
  threads_ = std::move(next);
  return pass;
}

std::map<int, SampledWait> WaitSampler::in_progress() const {
  std::map<int, SampledWait> out;
  for (const auto& [tid, t] : threads_)
    if (t.waiting) out.emplace(tid, t.wait);
  return out;
}

void WaitSampler::forget_tgid(int tgid) {
  std::erase_if(threads_, [&](const auto& kv) { return kv.second.wait.tgid == tgid || kv.first == tgid; });
}

std::string sampled_wait_record(const SampledWait& w, const std::string& comm) {
  auto header = [&](ht_event_header& h, uint32_t type, uint32_t size) {
    h.type = type;
    h.size = size;
    h.ts_ns = w.seen_until_ns;
    h.tgid = static_cast<uint32_t>(w.tgid);
    h.tid = static_cast<uint32_t>(w.tid);
    std::strncpy(h.comm, comm.c_str(), sizeof h.comm - 1);
  };
  if (w.wait_kind == HT_WAIT_FUTEX) {
    ht_futex_event e{};
    header(e.hdr, HT_EV_FUTEX_WAIT, sizeof e);
    e.uaddr = w.args[0];
    // futex_waitv(waiters, n, flags, ...), futex_wait(uaddr, val, mask, flags, ...)
    if (w.nr == HT_NR_futex)
      e.op = static_cast<uint32_t>(w.args[1]);
    else if (w.nr == HT_NR_futex_waitv)
      e.op = HT_FUTEX_OP_WAITV | static_cast<uint32_t>(w.args[2]);
    else
      e.op = HT_FUTEX_OP_WAIT2 | static_cast<uint32_t>(w.args[3]);
    e.ret = w.woken ? 0 : -ETIMEDOUT;
    e.duration_ns = w.duration_ns();
    e.kstack_id = -ENOENT;
    e.ustack_id = -ENOENT;
    return std::string(reinterpret_cast<const char*>(&e), sizeof e);
  }
  ht_syscall_event e{};
  header(e.hdr, HT_EV_SYSCALL_BLOCK, sizeof e);
  e.nr = w.nr;
  e.ret = 0;
  e.duration_ns = w.duration_ns();
  SampledCall c = classify_sampled_call(w.nr, w.args);
  e.fd = c.fd;
  e.obj_kind = w.fd.obj_kind;
  e.obj_inode = w.fd.inode;
  for (int i = 0; i < 3; ++i) e.args[i] = w.args[i];
  e.kstack_id = -ENOENT;
  e.ustack_id = -ENOENT;
  return std::string(reinterpret_cast<const char*>(&e), sizeof e);
}

}  // namespace hangtrace
