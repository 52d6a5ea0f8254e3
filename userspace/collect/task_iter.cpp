#include "task_iter.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <elf.h>
#include <fmt/format.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <tuple>

#include "hangtrace/abi.h"
#include "task_snapshot.skel.h"

namespace hangtrace {

// The BPF program writes these bytes and we reinterpret them: pin the layout
// so a change on one side without the other fails to compile.
static_assert(sizeof(ht_task_record) == 432 + 8 + 8 * HT_MAX_USER_REGS);
static_assert(offsetof(ht_task_record, abi_version) == 0);
static_assert(offsetof(ht_task_record, tid) == 4);
static_assert(offsetof(ht_task_record, tgid) == 8);
static_assert(offsetof(ht_task_record, ppid) == 12);
static_assert(offsetof(ht_task_record, state) == 16);
static_assert(offsetof(ht_task_record, exit_state) == 20);
static_assert(offsetof(ht_task_record, task_flags) == 24);
static_assert(offsetof(ht_task_record, sample_flags) == 28);
static_assert(offsetof(ht_task_record, off_cpu_ns) == 32);
static_assert(offsetof(ht_task_record, sum_exec_ns) == 40);
static_assert(offsetof(ht_task_record, nvcsw) == 48);
static_assert(offsetof(ht_task_record, nivcsw) == 56);
static_assert(offsetof(ht_task_record, start_boottime_ns) == 64);
static_assert(offsetof(ht_task_record, user_ip) == 72);
static_assert(offsetof(ht_task_record, user_sp) == 80);
static_assert(offsetof(ht_task_record, user_bp) == 88);
static_assert(offsetof(ht_task_record, syscall_nr) == 96);
static_assert(offsetof(ht_task_record, syscall_args) == 104);
static_assert(offsetof(ht_task_record, kstack_frames) == 152);
static_assert(offsetof(ht_task_record, wchan_pad) == 156);
static_assert(offsetof(ht_task_record, kstack) == 160);
static_assert(offsetof(ht_task_record, comm) == 160 + 8 * HT_MAX_KSTACK);
static_assert(offsetof(ht_task_record, user_machine) == 432);
static_assert(offsetof(ht_task_record, user_nregs) == 434);
static_assert(offsetof(ht_task_record, user_regs_pad) == 436);
static_assert(offsetof(ht_task_record, user_regs) == 440);
static_assert(sizeof(ht_task_brief) == 104);
static_assert(sizeof(ht_process_identity) == 64);
static_assert(offsetof(ht_process_identity, start_boottime_ns) == 16);
static_assert(offsetof(ht_process_identity, comm) == 48);
static_assert(offsetof(ht_task_brief, off_cpu_ns) == 24);
static_assert(offsetof(ht_task_brief, syscall_nr) == 48);
static_assert(offsetof(ht_task_brief, syscall_args) == 56);
static_assert(HT_USER_REGS_X86_64 <= HT_MAX_USER_REGS && HT_USER_REGS_ARM64 <= HT_MAX_USER_REGS);
// user_machine: the BPF side's copies of <elf.h>'s values.
static_assert(HT_EM_X86_64 == EM_X86_64 && HT_EM_AARCH64 == EM_AARCH64);
static_assert(std::tuple_size_v<decltype(KernelTaskView::user_regs)> == HT_MAX_USER_REGS);

namespace {

std::atomic<int> g_bpf_verbosity{0};

// libbpf is chatty (every CO-RE relocation at debug level); its messages only
// help someone debugging hangtrace itself.
int libbpf_print(enum libbpf_print_level level, const char* format, va_list args) {
  int verbosity = g_bpf_verbosity.load(std::memory_order_relaxed);
  if (verbosity <= 0) return 0;
  if (level == LIBBPF_DEBUG && verbosity < 2) return 0;
  return vfprintf(stderr, format, args);
}

Error load_error(const std::string& what, int err) {
  // libbpf returns -errno (and sets errno); either sign may reach us.
  err = err < 0 ? -err : err;
  std::string reason = err ? std::strerror(err) : "unknown error";
  if (!what.empty()) reason = what + ": " + reason;
  return make_error("failed to load BPF task iterator: " + reason);
}

// Owns everything for one pass so that every exit path tears it all down.
struct IterSession {
  task_snapshot_bpf* skel = nullptr;
  bpf_link* link = nullptr;
  int iter_fd = -1;
  ~IterSession() {
    if (iter_fd >= 0) close(iter_fd);
    bpf_link__destroy(link);
    task_snapshot_bpf__destroy(skel);
  }
};

KernelTaskSample to_sample(const ht_task_record& rec) {
  KernelTaskSample s;
  s.tid = static_cast<int>(rec.tid);
  s.tgid = static_cast<int>(rec.tgid);
  s.ppid = static_cast<int>(rec.ppid);
  s.comm.assign(rec.comm, strnlen(rec.comm, sizeof rec.comm));
  KernelTaskView& v = s.view;
  v.state = rec.state;
  v.task_flags = rec.task_flags;
  v.on_cpu = (rec.sample_flags & HT_TASK_ON_CPU) != 0;
  v.off_cpu_ns = rec.off_cpu_ns;
  v.sum_exec_ns = rec.sum_exec_ns;
  v.nvcsw = rec.nvcsw;
  v.nivcsw = rec.nivcsw;
  if (rec.kstack_frames < 0) {
    v.stack_error = rec.kstack_frames;
  } else {
    int n = std::min(rec.kstack_frames, HT_MAX_KSTACK);
    for (int i = 0; i < n; ++i) v.stack.push_back(KernelFrame{rec.kstack[i], {}});
  }
  if (rec.sample_flags & HT_TASK_HAS_USER_REGS) {
    v.user_ip = rec.user_ip;
    v.user_sp = rec.user_sp;
    v.user_bp = rec.user_bp;
    if (rec.user_machine != 0 && rec.user_nregs > 0 && rec.user_nregs <= HT_MAX_USER_REGS) {
      v.has_user_regs = true;
      v.user_machine = rec.user_machine;
      v.user_nregs = rec.user_nregs;
      std::copy(std::begin(rec.user_regs), std::end(rec.user_regs), v.user_regs.begin());
    }
    s.syscall_nr = rec.syscall_nr;
    std::copy(std::begin(rec.syscall_args), std::end(rec.syscall_args), s.syscall_args);
  }
  return s;
}

}  // namespace

void set_bpf_verbosity(int level) { g_bpf_verbosity.store(level, std::memory_order_relaxed); }

void install_bpf_print() { libbpf_set_print(libbpf_print); }

bool has_capability(int cap) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (cap < 0 || cap >= 32 * _LINUX_CAPABILITY_U32S_3) return false;
  if (syscall(SYS_capget, &header, data) != 0) return geteuid() == 0;
  return ((data[cap / 32].effective >> (cap % 32)) & 1u) != 0;
}

std::string bpf_unavailable_reason() {
  // Root whose capabilities were cut (a systemd unit, a container) is judged
  // by what it has.
  if (!has_capability(CAP_SYS_ADMIN) && !(has_capability(CAP_BPF) && has_capability(CAP_PERFMON))) {
    if (geteuid() != 0) return "not root: hangtrace needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE)";
    return fmt::format("missing {}{}{} (or CAP_SYS_ADMIN): no BPF programs can be loaded",
                       has_capability(CAP_BPF) ? "" : "CAP_BPF",
                       has_capability(CAP_BPF) || has_capability(CAP_PERFMON) ? "" : " and ",
                       has_capability(CAP_PERFMON) ? "" : "CAP_PERFMON");
  }
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
    return fmt::format("no BTF at /sys/kernel/btf/vmlinux: {} (kernel built without CONFIG_DEBUG_INFO_BTF?)",
                       std::strerror(errno));
  }
  return "";
}

namespace {

// keep_task_iterator_loaded(): the verified object between passes.
std::mutex g_kept_mu;
bool g_keep_loaded = false;
task_snapshot_bpf* g_kept = nullptr;
uint32_t g_kept_entries = 0;
// The tgids in the kept object's map: the next pass changes only what
// differs (the daemon's pass each second over 1,000 processes would
// otherwise delete and insert each one: 3,000 bpf() calls a second).
std::set<uint32_t> g_kept_tgids;
// Room in a kept object's tgid map: a job's processes, with margin.
constexpr uint32_t kKeptTgids = 4096;

}  // namespace

void keep_task_iterator_loaded(bool keep) {
  std::lock_guard lock(g_kept_mu);
  g_keep_loaded = keep;
  if (!keep && g_kept) {
    task_snapshot_bpf__destroy(g_kept);
    g_kept = nullptr;
    g_kept_tgids.clear();
  }
}

namespace {

// One pass of the program `which` picks from the (kept or fresh) object over
// `tgids` (null: a program that reads no tgid map, which is left as it is):
// the bytes it wrote, a whole number of `record_size` records.
Result<std::string> run_task_iterator(const std::vector<int>* tgids,
                                      bpf_program* (*which)(task_snapshot_bpf*), size_t record_size) {
  libbpf_set_print(libbpf_print);
  std::lock_guard lock(g_kept_mu);

  IterSession s;
  task_snapshot_bpf* skel = nullptr;
  std::set<uint32_t> wanted;
  const size_t count = tgids ? tgids->size() : 0;
  if (tgids)
    for (int tgid : *tgids)
      if (tgid > 0) wanted.insert(static_cast<uint32_t>(tgid));
  if (g_kept && count <= g_kept_entries) {
    // Reused: the tgid set of the last pass becomes this one's.
    skel = g_kept;
    int fd = bpf_map__fd(skel->maps.target_tgids);
    for (auto it = g_kept_tgids.begin(); tgids && it != g_kept_tgids.end();) {
      if (wanted.count(*it)) {
        ++it;
        continue;
      }
      uint32_t key = *it;
      if (bpf_map_delete_elem(fd, &key) != 0 && errno != ENOENT) {
        g_kept_tgids.clear();  // unknown now: a fresh object next time
        g_kept_entries = 0;
        return load_error("emptying the tgid map", errno);
      }
      it = g_kept_tgids.erase(it);
    }
  } else {
    s.skel = task_snapshot_bpf__open();
    if (!s.skel) return load_error("open", errno);
    uint32_t entries = static_cast<uint32_t>(std::max<size_t>(count, 1));
    if (g_keep_loaded) entries = std::max(entries, kKeptTgids);
    if (int err = bpf_map__set_max_entries(s.skel->maps.target_tgids, entries)) {
      return load_error("sizing the tgid map", err);
    }
    if (int err = task_snapshot_bpf__load(s.skel)) return load_error("", err);
    skel = s.skel;
    if (g_keep_loaded) {
      if (g_kept) task_snapshot_bpf__destroy(g_kept);  // too small for this job
      g_kept = s.skel;
      g_kept_entries = entries;
      g_kept_tgids.clear();
      s.skel = nullptr;  // not this pass's to destroy
    }
  }

  int map_fd = bpf_map__fd(skel->maps.target_tgids);
  const bool kept = skel == g_kept;
  for (uint32_t key : wanted) {
    if (kept && g_kept_tgids.count(key)) continue;  // in the map since an earlier pass
    uint8_t one = 1;
    if (bpf_map_update_elem(map_fd, &key, &one, BPF_ANY) != 0) {
      if (kept) {
        g_kept_tgids.clear();
        g_kept_entries = 0;
      }
      return load_error("filling the tgid map", errno);
    }
    if (kept) g_kept_tgids.insert(key);
  }

  s.link = bpf_program__attach_iter(which(skel), nullptr);
  if (!s.link) return load_error("attaching the iterator", errno);
  s.iter_fd = bpf_iter_create(bpf_link__fd(s.link));
  if (s.iter_fd < 0) return load_error("creating the iterator", errno);

  // The kernel never splits a record across seq_file buffers, but read()
  // may hand back any byte count, so collect everything before parsing.
  std::string bytes;
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = read(s.iter_fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      // EAGAIN here means the iteration hit its restart limit; a partial
      // snapshot would misreport which threads exist, so fail instead.
      return make_error(fmt::format("failed to read BPF task iterator: {}", std::strerror(errno)));
    }
    bytes.append(buf, static_cast<size_t>(n));
  }
  if (bytes.size() % record_size != 0) {
    return make_error(
        fmt::format("failed to read BPF task iterator: {} bytes is not a whole number of {}-byte records",
                    bytes.size(), record_size));
  }
  return bytes;
}

// The iterator's bytes as records of one ABI version, each converted.
template <typename Record, typename Out, typename Convert>
Result<std::vector<Out>> decode_records(const std::string& bytes, Convert convert) {
  std::vector<Out> out;
  out.reserve(bytes.size() / sizeof(Record));
  for (size_t off = 0; off < bytes.size(); off += sizeof(Record)) {
    Record rec;
    std::memcpy(&rec, bytes.data() + off, sizeof rec);
    if (rec.abi_version != HT_ABI_VERSION)
      return make_error(fmt::format("failed to read BPF task iterator: record ABI version {} (expected {})",
                                    rec.abi_version, HT_ABI_VERSION));
    out.push_back(convert(rec));
  }
  return out;
}

}  // namespace

Result<std::vector<KernelTaskSample>> sample_kernel_tasks(const std::vector<int>& tgids) {
  auto read = run_task_iterator(
      &tgids, [](task_snapshot_bpf* skel) { return skel->progs.ht_task_snapshot; }, sizeof(ht_task_record));
  if (!read) return make_error(read.error());
  return decode_records<ht_task_record, KernelTaskSample>(*read, to_sample);
}

Result<std::vector<TaskBrief>> sample_task_briefs(const std::vector<int>& tgids) {
  auto read = run_task_iterator(
      &tgids, [](task_snapshot_bpf* skel) { return skel->progs.ht_task_brief; }, sizeof(ht_task_brief));
  if (!read) return make_error(read.error());
  return decode_records<ht_task_brief, TaskBrief>(*read, [](const ht_task_brief& rec) {
    TaskBrief b;
    b.tid = static_cast<int>(rec.tid);
    b.tgid = static_cast<int>(rec.tgid);
    b.on_cpu = (rec.sample_flags & HT_TASK_ON_CPU) != 0;
    b.off_cpu_ns = rec.off_cpu_ns;
    b.sum_exec_ns = rec.sum_exec_ns;
    b.nvcsw = rec.nvcsw;
    if (rec.sample_flags & HT_TASK_HAS_USER_REGS) {
      b.syscall_nr = rec.syscall_nr;
      std::copy(std::begin(rec.syscall_args), std::end(rec.syscall_args), b.syscall_args);
    }
    return b;
  });
}

Result<std::vector<procfs::ProcStat>> sample_process_identities() {
  auto read = run_task_iterator(
      nullptr, [](task_snapshot_bpf* skel) { return skel->progs.ht_process_identity; },
      sizeof(ht_process_identity));
  if (!read) return make_error(read.error());
  // /proc/PID/stat prints start_boottime in clock ticks (nsec_to_clock_t).
  static const uint64_t ns_per_tick = [] {
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? 1'000'000'000ull / static_cast<uint64_t>(hz) : 10'000'000ull;
  }();
  auto out = decode_records<ht_process_identity, procfs::ProcStat>(*read, [](const ht_process_identity& rec) {
    procfs::ProcStat st;
    st.pid = static_cast<int>(rec.pid);
    st.ppid = static_cast<int>(rec.ppid);
    st.flags = rec.task_flags;
    st.comm.assign(rec.comm, strnlen(rec.comm, sizeof rec.comm));
    st.start_time_ticks = rec.start_boottime_ns / ns_per_tick;
    st.start_stack = rec.start_stack;
    st.arg_start = rec.arg_start;
    st.arg_end = rec.arg_end;
    return st;
  });
  if (out) std::sort(out->begin(), out->end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
  return out;
}

}  // namespace hangtrace
