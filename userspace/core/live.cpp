#include "hangtrace/live.h"

#include <arpa/inet.h>
#include <csignal>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "hangtrace/abi.h"
#include "hangtrace/syscall_nr.h"
#include "hangtrace/syscalls.h"

namespace hangtrace {

const char* event_type_name(uint32_t type) {
  switch (type) {
    case HT_EV_PROC_FORK:
      return "fork";
    case HT_EV_PROC_EXEC:
      return "exec";
    case HT_EV_PROC_EXIT:
      return "exit";
    case HT_EV_SIGNAL:
      return "signal";
    case HT_EV_OOM_VICTIM:
      return "oom-victim";
    case HT_EV_FUTEX_WAIT:
      return "futex-wait";
    case HT_EV_FUTEX_WAKE:
      return "futex-wake";
    case HT_EV_SYSCALL_BLOCK:
      return "syscall-block";
    case HT_EV_SHM:
      return "shm";
    case HT_EV_TCP_STATE:
      return "tcp-state";
    case HT_EV_TCP_RETRANSMIT:
      return "tcp-retransmit";
    case HT_EV_RSS:
      return "rss";
    case HT_EV_WAKEUP:
      return "wakeup";
    case HT_EV_GPU_CALL:
      return "gpu-call";
    case HT_EV_GPU_ACTIVITY:
      return "gpu-activity";
    case HT_EV_SHORT_WAITS:
      return "short-waits";
    default:
      return "unknown";
  }
}

const char* shm_op_name(uint32_t op) {
  switch (op) {
    case HT_SHM_CREATE:
      return "create";
    case HT_SHM_TRUNCATE:
      return "truncate";
    case HT_SHM_FALLOCATE:
      return "fallocate";
    case HT_SHM_MMAP:
      return "mmap";
    case HT_SHM_UNLINK:
      return "unlink";
    case HT_SHM_ENOSPC:
      return "ENOSPC";
    case HT_SHM_FAULT:
      return "fault";
    case HT_SHM_SIGBUS:
      return "SIGBUS";
    default:
      return "unknown";
  }
}

namespace {

template <class T>
bool read_record(const void* data, size_t size, T* out) {
  if (size < sizeof(T)) return false;
  std::memcpy(out, data, sizeof(T));
  return true;
}

// The kernel's strings end in a NUL inside their field; a record whose do not
// (not one a BPF program writes) is cut as if they did, never a byte more.
std::string comm_of(const char* c) { return std::string(c, strnlen(c, HT_COMM_LEN - 1)); }

std::string endpoint(uint16_t family, const uint8_t* addr, uint16_t port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET) {
    inet_ntop(AF_INET, addr, buf, sizeof buf);
    return fmt::format("{}:{}", buf, port);
  }
  inet_ntop(AF_INET6, addr, buf, sizeof buf);
  return fmt::format("[{}]:{}", buf, port);
}

static_assert(sizeof(ShortWaits::buckets) / sizeof(uint32_t) == HT_SHORT_WAIT_BUCKETS);

ShortWaits short_waits_of(const ht_short_waits& r) {
  ShortWaits w;
  w.nr = r.futex ? int64_t{HT_NR_futex} : r.nr;
  w.object = r.object;
  w.fd = r.futex ? -1 : r.fd;
  w.obj_kind = r.obj_kind;
  w.timed_out = r.timed_out != 0;
  w.futex = r.futex != 0;
  if (!w.timed_out && r.waker_tid) {
    w.waker_tgid = static_cast<int>(r.waker_tgid);
    w.waker_tid = static_cast<int>(r.waker_tid);
    w.waker_comm = comm_of(r.waker_comm);
  }
  w.count = r.count;
  w.sum_ns = r.sum_ns;
  std::memcpy(w.buckets, r.buckets, sizeof w.buckets);
  return w;
}

}  // namespace

Result<TraceEvent> decode_event(const void* data, size_t size) {
  ht_event_header h{};
  if (!read_record(data, size, &h)) return make_error(fmt::format("record of {} bytes is too short", size));
  if (h.size > size) return make_error(fmt::format("record claims {} bytes, has {}", h.size, size));
  TraceEvent e;
  e.type = h.type;
  e.ts_ns = h.ts_ns;
  e.tgid = static_cast<int>(h.tgid);
  e.tid = static_cast<int>(h.tid);
  e.comm = comm_of(h.comm);
  auto too_short = [&] {
    return make_error(fmt::format("{} record of {} bytes is too short", event_type_name(h.type), size));
  };
  switch (h.type) {
    case HT_EV_PROC_FORK:
    case HT_EV_PROC_EXEC:
    case HT_EV_PROC_EXIT: {
      ht_proc_event r{};
      if (!read_record(data, size, &r)) return too_short();
      e.parent_tgid = static_cast<int>(r.parent_tgid);
      e.child_tgid = static_cast<int>(r.child_tgid);
      e.exit_code = r.exit_code;
      e.group_exit = (r.flags & HT_PROC_WHOLE_PROCESS) != 0;
      break;
    }
    case HT_EV_SIGNAL: {
      ht_signal_event r{};
      if (!read_record(data, size, &r)) return too_short();
      e.sig = static_cast<int>(r.sig);
      e.si_code = r.code;
      e.sig_result = r.result;
      e.sender_tgid = static_cast<int>(r.sender_tgid);
      e.sender_tid = static_cast<int>(r.sender_tid);
      e.sender_comm = comm_of(r.sender_comm);
      break;
    }
    case HT_EV_OOM_VICTIM: {
      ht_oom_event r{};
      if (!read_record(data, size, &r)) return too_short();
      e.total_vm_kb = r.total_vm_kb;
      e.anon_rss_kb = r.anon_rss_kb;
      e.file_rss_kb = r.file_rss_kb;
      e.shmem_rss_kb = r.shmem_rss_kb;
      e.oom_score_adj = r.oom_score_adj;
      e.memcg_id = r.memcg_id;
      e.memcg_limit_bytes = r.memcg_limit_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
      break;
    }
    case HT_EV_FUTEX_WAIT:
    case HT_EV_FUTEX_WAKE: {
      ht_futex_event r{};
      if (!read_record(data, size, &r)) return too_short();
      e.uaddr = r.uaddr;
      e.op = r.op;
      e.ret = r.ret;
      e.duration_ns = r.duration_ns;
      e.timeout_ns = r.timeout_ns;
      e.kstack_id = r.kstack_id;
      e.ustack_id = r.ustack_id;
      break;
    }
    case HT_EV_SYSCALL_BLOCK: {
      ht_syscall_event r{};
      if (!read_record(data, size, &r)) return too_short();
      e.nr = r.nr;
      e.ret = r.ret;
      e.duration_ns = r.duration_ns;
      e.fd = r.fd;
      e.obj_kind = r.obj_kind;
      e.obj_inode = r.obj_inode;
      e.kstack_id = r.kstack_id;
      e.ustack_id = r.ustack_id;
      if (r.obj_kind == HT_OBJ_FILE) {
        e.mnt_id = r.mnt_id;
        e.file = std::string(r.file, strnlen(r.file, sizeof r.file - 1));
      }
      break;
    }
    case HT_EV_SHM: {
      ht_shm_event r{};
      if (!read_record(data, size, &r)) return too_short();
      e.shm_op = r.op;
      e.ret = r.ret;
      e.inode = r.inode;
      e.size = r.size;
      e.addr = r.addr;
      e.fs_size = r.fs_size;
      e.fs_used = r.fs_used;
      e.name = std::string(r.name, strnlen(r.name, sizeof r.name));
      break;
    }
    case HT_EV_TCP_STATE:
    case HT_EV_TCP_RETRANSMIT: {
      ht_tcp_event r{};
      if (!read_record(data, size, &r)) return too_short();
      e.local = endpoint(r.family, r.saddr, r.sport);
      e.remote = endpoint(r.family, r.daddr, r.dport);
      e.old_state = r.oldstate;
      e.new_state = r.newstate;
      break;
    }
    case HT_EV_RSS: {
      ht_rss_event r{};
      if (!read_record(data, size, &r)) return too_short();
      e.rss_bytes = r.rss_bytes;
      e.anon_bytes = r.anon_bytes;
      break;
    }
    case HT_EV_SHORT_WAITS: {
      ht_short_waits_event r{};
      if (!read_record(data, size, &r)) return too_short();
      e.short_waits = short_waits_of(r.waits);
      break;
    }
    case HT_EV_WAKEUP: {
      ht_wakeup_event r{};
      if (!read_record(data, size, &r)) return too_short();
      e.waker_tgid = static_cast<int>(r.waker_tgid);
      e.waker_tid = static_cast<int>(r.waker_tid);
      e.waker_comm = comm_of(r.waker_comm);
      e.kstack_id = r.waker_kstack_id;
      e.ustack_id = r.waker_ustack_id;
      break;
    }
    case HT_EV_GPU_CALL: {
      ht_gpu_call_event r{};
      if (!read_record(data, size, &r)) return too_short();
      GpuCall& c = e.gpu_call;
      c.pid = e.tgid;
      c.tid = e.tid;
      c.comm = e.comm;
      c.fn = r.fn;
      c.ret = r.ret;
      c.start_ns = r.start_ns;
      c.end_ns = h.ts_ns;
      c.stream = r.stream;
      c.handle = r.handle;
      c.count = r.count;
      c.seq = r.seq;
      c.datatype = r.datatype;
      c.peer = r.peer;
      c.ustack_id = r.ustack_id;
      e.ustack_id = r.ustack_id;
      e.duration_ns = h.ts_ns >= r.start_ns ? h.ts_ns - r.start_ns : 0;
      break;
    }
    case HT_EV_GPU_ACTIVITY: {
      ht_gpu_activity_event r{};
      if (!read_record(data, size, &r)) return too_short();
      const ht_gpu_activity& a = r.act;
      if (a.version != HT_GPU_ACTIVITY_VERSION || a.size != sizeof(ht_gpu_activity))
        return make_error(fmt::format("gpu-activity record of version {} and size {} (expected {} and {})",
                                      a.version, a.size, HT_GPU_ACTIVITY_VERSION, sizeof(ht_gpu_activity)));
      GpuActivity& g = e.gpu_activity;
      g.kind = a.kind;
      g.start_ns = a.start_ns;
      g.end_ns = a.end_ns;
      g.correlation_id = a.correlation_id;
      g.device_id = a.device_id;
      g.context_id = a.context_id;
      g.stream_id = a.stream_id;
      g.pid = a.pid ? static_cast<int>(a.pid) : e.tgid;
      g.tid = static_cast<int>(a.tid);
      g.detail = a.detail;
      g.bytes = a.bytes;
      for (int i = 0; i < 3; ++i) {
        g.grid[i] = a.grid[i];
        g.block[i] = a.block[i];
      }
      g.name = std::string(a.name, strnlen(a.name, sizeof a.name));
      break;
    }
    default:
      return make_error(fmt::format("unknown record type {}", h.type));
  }
  return e;
}

std::optional<std::string> cgroup_controller_path(const std::string& text, std::string_view controller,
                                                  bool* v2) {
  std::optional<std::string> unified;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    size_t c1 = line.find(':');
    size_t c2 = c1 == std::string::npos ? std::string::npos : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string path = line.substr(c2 + 1);
    if (controllers.empty()) {
      unified = path;
      continue;
    }
    size_t start = 0;
    while (start <= controllers.size()) {
      size_t comma = controllers.find(',', start);
      if (controllers.substr(start, comma == std::string::npos ? std::string::npos : comma - start) ==
          controller) {
        if (v2) *v2 = false;
        return path;
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (unified && v2) *v2 = true;
  return unified;
}

std::optional<std::string> memory_cgroup_path(const std::string& text, bool* v2) {
  return cgroup_controller_path(text, "memory", v2);
}

// ---- aggregation ----------------------------------------------------------------

const ProcessMeta* Aggregator::meta(int pid) const {
  auto it = obs_.meta.find(pid);
  return it == obs_.meta.end() ? nullptr : &it->second;
}

ProcessDeath& Aggregator::death_of(int pid) {
  for (auto& d : obs_.deaths)
    if (d.pid == pid) return d;
  obs_.deaths.push_back({});
  obs_.deaths.back().pid = pid;
  return obs_.deaths.back();
}

void Aggregator::add(const TraceEvent& e) {
  auto bounded_push = [&](std::vector<TraceEvent>& v) {
    if (v.size() < max_list_) v.push_back(e);
  };
  switch (e.type) {
    case HT_EV_PROC_FORK:
      if (e.child_tgid && obs_.forked.size() < max_list_) obs_.forked.push_back(e.child_tgid);
      break;
    case HT_EV_SIGNAL:
      // Who stopped a process (the stopped rule names the sender).
      if (e.sig == SIGSTOP || e.sig == SIGTSTP || e.sig == SIGTTIN || e.sig == SIGTTOU) {
        obs_.stop_signals[e.tgid] = e;
        break;
      }
      if (e.sig == SIGCONT) obs_.stop_signals.erase(e.tgid);
      // SIGKILL, SIGBUS, SIGSEGV, SIGABRT, SIGTERM, SIGINT, SIGQUIT, SIGFPE, SIGILL:
      // the ones that end a worker; remember the last one per process.
      if (e.sig == 9 || e.sig == 7 || e.sig == 11 || e.sig == 6 || e.sig == 15 || e.sig == 2 || e.sig == 3 ||
          e.sig == 8 || e.sig == 4)
        pending_signal_[e.tgid] = e;
      break;
    case HT_EV_OOM_VICTIM:
      pending_oom_[e.tgid] = e;
      break;
    case HT_EV_SHM: {
      bounded_push(obs_.shm);
      auto& recent = recent_shm_[e.tgid];
      if (e.shm_op == HT_SHM_ENOSPC || e.shm_op == HT_SHM_SIGBUS || e.shm_op == HT_SHM_FAULT) {
        recent.push_back(e);
        if (recent.size() > 8) recent.erase(recent.begin());
      }
      break;
    }
    case HT_EV_PROC_EXIT: {
      if (!e.group_exit && e.tid != e.tgid) break;
      ProcessDeath& d = death_of(e.tgid);
      d.comm = e.comm;
      d.ts_ns = e.ts_ns;
      d.exit_code = e.exit_code;
      d.signal = e.exit_code & 0x7f;
      if (auto it = pending_oom_.find(e.tgid); it != pending_oom_.end()) {
        d.oom_victim = true;
        d.oom = it->second;
      }
      if (auto it = pending_signal_.find(e.tgid); it != pending_signal_.end()) d.fatal_signal = it->second;
      if (auto it = recent_shm_.find(e.tgid); it != recent_shm_.end()) d.shm_trouble = it->second;
      break;
    }
    case HT_EV_RSS: {
      RssSeries& s = obs_.rss[e.tgid];
      if (s.samples == 0) {
        s.pid = e.tgid;
        s.first_ts_ns = e.ts_ns;
        s.first_bytes = e.rss_bytes;
      }
      s.comm = e.comm;
      s.last_ts_ns = e.ts_ns;
      s.last_bytes = e.rss_bytes;
      s.max_bytes = std::max(s.max_bytes, e.rss_bytes);
      ++s.samples;
      break;
    }
    case HT_EV_FUTEX_WAIT: {
      uint64_t start = e.ts_ns >= e.duration_ns ? e.ts_ns - e.duration_ns : 0;
      add_blocked({start, e.ts_ns, e.uaddr, -1, e.type, e.kstack_id, e.ustack_id}, e.tid);
      add_wait_total({e.type,
                      e.tgid,
                      e.tid,
                      start,
                      e.ts_ns,
                      HT_NR_futex,
                      -1,
                      HT_OBJ_UNKNOWN,
                      e.uaddr,
                      e.ret,
                      0,
                      {},
                      e.kstack_id,
                      e.ustack_id});
      break;
    }
    case HT_EV_SYSCALL_BLOCK: {
      uint64_t start = e.ts_ns >= e.duration_ns ? e.ts_ns - e.duration_ns : 0;
      add_blocked({start, e.ts_ns, static_cast<uint64_t>(e.nr), e.fd, e.type, e.kstack_id, e.ustack_id},
                  e.tid);
      add_wait_total({e.type, e.tgid, e.tid, start, e.ts_ns, e.nr, e.fd, e.obj_kind, e.obj_inode, e.ret,
                      e.mnt_id, e.file, e.kstack_id, e.ustack_id});
      break;
    }
    case HT_EV_SHORT_WAITS:
      add_short_waits(e.tgid, e.tid, e.ts_ns, e.short_waits);
      break;
    case HT_EV_WAKEUP: {
      obs_.last_waker[e.tid] = e;
      auto& q = obs_.recent_wakeups[e.tid];
      q.push_back(e);
      if (q.size() > per_thread_) q.pop_front();
      break;
    }
    case HT_EV_TCP_STATE:
    case HT_EV_TCP_RETRANSMIT:
      bounded_push(obs_.tcp);
      break;
    case HT_EV_GPU_CALL:
      add_gpu_host_wait(e.gpu_call);
      obs_.gpu.calls.push_back(e.gpu_call);
      if (obs_.gpu.calls.size() > max_list_) obs_.gpu.calls.pop_front();
      break;
    case HT_EV_GPU_ACTIVITY:
      add_gpu_activity(e.gpu_activity);
      break;
    default:
      break;
  }
}

void Aggregator::add_gpu_activity(const GpuActivity& a) {
  GpuObservation& g = obs_.gpu;
  switch (a.kind) {
    case HT_GPU_ACT_STATUS:
      if (g.cupti_status.size() < 64) g.cupti_status.push_back(a.name);
      return;
    case HT_GPU_ACT_CLOCK:
      g.cupti_clock_offset_ns = static_cast<int64_t>(a.start_ns - a.end_ns);
      g.cupti_clock_uncertainty_ns = a.bytes;
      g.cupti_calibrated = true;
      return;
    case HT_GPU_ACT_KERNEL:
      if (a.end_ns > a.start_ns) {
        KernelDurations& d = g.kernel_durations[a.name];
        uint64_t ns = a.end_ns - a.start_ns;
        ++d.count;
        d.total_ns += ns;
        d.max_ns = std::max(d.max_ns, ns);
        d.recent_ns.push_back(ns);
        if (d.recent_ns.size() > 64) d.recent_ns.pop_front();
      }
      break;
    default:
      break;
  }
  ++g.activity_records;
  g.activity.push_back(a);
  if (g.activity.size() > max_list_) g.activity.pop_front();
}

Aggregator::Raw Aggregator::add_raw(const void* data, size_t size) {
  ht_event_header h;
  if (size < sizeof h) return Raw::NotHot;  // decode_event says why
  std::memcpy(&h, data, sizeof h);
  switch (h.type) {
    case HT_EV_FUTEX_WAIT:
    case HT_EV_FUTEX_WAKE: {
      ht_futex_event r;
      if (h.size > size || size < sizeof r) return Raw::Undecodable;
      if (h.type == HT_EV_FUTEX_WAKE) return Raw::Added;  // counted in the kernel, nothing kept
      std::memcpy(&r, data, sizeof r);
      uint64_t start = h.ts_ns >= r.duration_ns ? h.ts_ns - r.duration_ns : 0;
      add_blocked({start, h.ts_ns, r.uaddr, -1, h.type, r.kstack_id, r.ustack_id}, static_cast<int>(h.tid));
      add_wait_total({h.type,
                      static_cast<int>(h.tgid),
                      static_cast<int>(h.tid),
                      start,
                      h.ts_ns,
                      HT_NR_futex,
                      -1,
                      HT_OBJ_UNKNOWN,
                      r.uaddr,
                      r.ret,
                      0,
                      {},
                      r.kstack_id,
                      r.ustack_id});
      return Raw::Added;
    }
    case HT_EV_SYSCALL_BLOCK: {
      ht_syscall_event r;
      if (h.size > size || size < sizeof r) return Raw::Undecodable;
      std::memcpy(&r, data, sizeof r);
      uint64_t start = h.ts_ns >= r.duration_ns ? h.ts_ns - r.duration_ns : 0;
      add_blocked({start, h.ts_ns, static_cast<uint64_t>(r.nr), r.fd, h.type, r.kstack_id, r.ustack_id},
                  static_cast<int>(h.tid));
      add_wait_total({h.type, static_cast<int>(h.tgid), static_cast<int>(h.tid), start, h.ts_ns, r.nr, r.fd,
                      r.obj_kind, r.obj_inode, r.ret, r.mnt_id,
                      r.obj_kind == HT_OBJ_FILE ? std::string_view(r.file, strnlen(r.file, sizeof r.file))
                                                : std::string_view{},
                      r.kstack_id, r.ustack_id});
      return Raw::Added;
    }
    case HT_EV_SHORT_WAITS: {
      ht_short_waits_event r;
      if (h.size > size || size < sizeof r) return Raw::Undecodable;
      std::memcpy(&r, data, sizeof r);
      add_short_waits(static_cast<int>(h.tgid), static_cast<int>(h.tid), h.ts_ns, short_waits_of(r.waits));
      return Raw::Added;
    }
    default:
      return Raw::NotHot;
  }
}

Aggregator::IntervalRing& Aggregator::ring_of(int tid) {
  if (!last_ring_ || tid != last_tid_) {
    last_ring_ = &rings_[tid];
    last_tid_ = tid;
  }
  return *last_ring_;
}

void Aggregator::add_blocked(const RawInterval& b, int tid) {
  blocked_dirty_ = true;
  IntervalRing& r = ring_of(tid);
  if (r.slots.size() < per_thread_) {
    r.slots.push_back(b);
  } else if (per_thread_) {
    r.slots[r.next] = b;
    r.next = (r.next + 1) % per_thread_;
  }
}

void Aggregator::flush_blocked() {
  if (!blocked_dirty_) return;
  blocked_dirty_ = false;
  for (const auto& [tid, ring] : rings_) {
    if (ring.slots.empty()) continue;  // only short waits or GPU calls of it
    auto& q = obs_.blocked[tid];
    q.clear();
    for (size_t i = 0; i < ring.slots.size(); ++i) {
      const RawInterval& r = ring.slots[(ring.next + i) % ring.slots.size()];
      BlockedInterval b;
      b.start_ns = r.start_ns;
      b.end_ns = r.end_ns;
      b.kstack_id = r.kstack_id;
      b.ustack_id = r.ustack_id;
      if (r.type == HT_EV_FUTEX_WAIT) {
        b.what = fmt::format("futex {:#x}", r.key);
      } else {
        // Named once per interval read, not per record: this runs when the
        // observation is read.
        std::string name = describe_syscall(static_cast<int64_t>(r.key)).name;
        b.what = r.fd >= 0 ? fmt::format("{} fd {}", name, r.fd) : name;
      }
      q.push_back(std::move(b));
    }
  }
}

LiveObservation& Aggregator::observation() {
  flush_blocked();
  return obs_;
}

LiveObservation Aggregator::finish(uint64_t start_ns, uint64_t end_ns, uint64_t events, uint64_t dropped) {
  // An OOM kill or a fatal signal whose exit we never saw (the window closed
  // first) still counts.
  for (const auto& [pid, oom] : pending_oom_) {
    ProcessDeath& d = death_of(pid);
    if (!d.ts_ns) {
      d.comm = oom.comm;
      d.ts_ns = oom.ts_ns;
      d.signal = 9;
    }
    d.oom_victim = true;
    d.oom = oom;
  }
  flush_blocked();
  obs_.start_ns = start_ns;
  obs_.end_ns = end_ns;
  obs_.duration_s = end_ns > start_ns ? static_cast<double>(end_ns - start_ns) / 1e9 : 0;
  obs_.events = events;
  obs_.dropped = dropped;
  return obs_;
}

}  // namespace hangtrace
