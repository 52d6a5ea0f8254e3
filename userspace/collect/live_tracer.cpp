#include "live_tracer.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "hangtrace/abi.h"
#include "live_modules.h"
#include "task_iter.h"

namespace hangtrace {

// The BPF programs write these bytes and the aggregator reinterprets them:
// pin the layouts so a change on one side without the other fails to compile.
static_assert(sizeof(ht_event_header) == 40);
static_assert(offsetof(ht_event_header, ts_ns) == 8);
static_assert(offsetof(ht_event_header, tgid) == 16);
static_assert(offsetof(ht_event_header, comm) == 24);
static_assert(sizeof(ht_proc_event) == 56);
static_assert(sizeof(ht_signal_event) == 80);
static_assert(offsetof(ht_signal_event, sender_comm) == 64);
static_assert(sizeof(ht_oom_event) == 96);
static_assert(offsetof(ht_oom_event, memcg_id) == 80);
static_assert(offsetof(ht_event_header, type) == 0);

namespace {

Error live_error(const std::string& what, int err) {
  err = err < 0 ? -err : err;
  return make_error(fmt::format("failed to start live tracing: {}: {}", what, std::strerror(err)));
}

// The ring buffer's size must be a power of two and a multiple of the page.
uint64_t ringbuf_size(uint64_t want) {
  uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  while (size < want && size < (1ull << 31)) size <<= 1;
  return size;
}

int create_map(bpf_map_type type, const char* name, uint32_t key, uint32_t value, uint32_t entries) {
  int fd = bpf_map_create(type, name, key, value, entries, nullptr);
  return fd < 0 ? -errno : fd;
}

}  // namespace

Result<bool> SharedMaps::reuse_in(struct bpf_object* obj) const {
  const std::pair<const char*, int> shared[] = {
      {"events", events}, {"traced_tgids", traced_tgids}, {"counters", counters}, {"stacks", stacks}};
  for (const auto& [name, fd] : shared) {
    // A concern that never touches a map may have had it dropped by the compiler.
    bpf_map* map = bpf_object__find_map_by_name(obj, name);
    if (!map) continue;
    if (fd < 0) return make_error(fmt::format("failed to share map {}: not created", name));
    if (int err = bpf_map__reuse_fd(map, fd)) {
      return make_error(fmt::format("failed to share map {}: {}", name, std::strerror(err < 0 ? -err : err)));
    }
  }
  if (wake_batches >= 0)
    if (bpf_map* map = bpf_object__find_map_by_name(obj, "wake_batches"))
      if (int err = bpf_map__reuse_fd(map, wake_batches))
        return make_error(
            fmt::format("failed to share map wake_batches: {}", std::strerror(err < 0 ? -err : err)));
  return true;
}

void SharedMaps::adopt_created(struct bpf_object* obj) const {
  if (wake_batches >= 0) return;
  bpf_map* map = bpf_object__find_map_by_name(obj, "wake_batches");
  if (!map || bpf_map__fd(map) < 0) return;
  wake_batches = fcntl(bpf_map__fd(map), F_DUPFD_CLOEXEC, 0);
}

Result<std::unique_ptr<LiveTracer>> LiveTracer::start(const LiveOptions& options) {
  // The same libbpf message filter as the snapshot; silent unless asked.
  if (options.verbosity > 0) set_bpf_verbosity(options.verbosity);
  install_bpf_print();

  std::unique_ptr<LiveTracer> t(new LiveTracer());
  LiveTracer* self = t.get();
  t->mapped_ =
      std::make_unique<MappedModules>(options.module_rescan, [self](int pid, const std::string& path) {
        for (const auto& module : self->modules_) module->notice_mapped_file(pid, path);
      });
  SharedMaps& m = t->maps_;
  m.events = create_map(BPF_MAP_TYPE_RINGBUF, "events", 0, 0,
                        static_cast<uint32_t>(ringbuf_size(options.ringbuf_bytes)));
  if (m.events < 0) return live_error("creating the ring buffer", m.events);
  uint32_t traced_entries = static_cast<uint32_t>(std::max<size_t>(4096, options.tgids.size() * 2));
  m.traced_tgids =
      create_map(BPF_MAP_TYPE_HASH, "traced_tgids", sizeof(uint32_t), sizeof(uint8_t), traced_entries);
  if (m.traced_tgids < 0) return live_error("creating the traced set", m.traced_tgids);
  m.counters =
      create_map(BPF_MAP_TYPE_PERCPU_ARRAY, "counters", sizeof(uint32_t), sizeof(uint64_t), HT_CNT_MAX);
  if (m.counters < 0) return live_error("creating the counters", m.counters);
  // A stack whose hash bucket another stack took first is lost for the whole
  // run (bpf_get_stackid -EEXIST; replacing it would relabel the records
  // that hold the old id). User stacks hash at random (ASLR), so with n
  // distinct stacks about n / buckets of them are lost: 16384 buckets keep
  // that under 1 % for a few hundred, for ~17 MiB of kernel memory. The
  // ones lost are counted (HT_CNT_STACKS_LOST) and reported.
  m.stacks = create_map(BPF_MAP_TYPE_STACK_TRACE, "stacks", sizeof(uint32_t), 127 * sizeof(uint64_t),
                        std::max<uint32_t>(1, options.stack_map_entries));
  if (m.stacks < 0) return live_error("creating the stack map", m.stacks);

  // Filled before anything attaches, so no event of the target is missed
  // for want of an entry.
  for (int tgid : options.tgids) {
    if (tgid <= 0) continue;
    uint32_t key = static_cast<uint32_t>(tgid);
    uint8_t one = 1;
    if (bpf_map_update_elem(m.traced_tgids, &key, &one, BPF_ANY) != 0) {
      return live_error("filling the traced set", errno);
    }
  }

  for (auto& module : all_live_modules()) {
    std::string name = module->name();
    auto loaded = module->load(m, options);
    if (!loaded) {
      // The process concern follows forks: without it the traced set
      // would silently stop at the processes named at start.
      if (name == "process") return make_error("failed to start live tracing: " + loaded.error());
      HookStatus h;
      h.concern = name;
      h.program = "*";
      h.reason = loaded.error();
      t->failed_.push_back(std::move(h));
      continue;
    }
    auto attached = module->attach();
    if (!attached) {
      if (name == "process") return make_error("failed to start live tracing: " + attached.error());
      HookStatus h;
      h.concern = name;
      h.program = "*";
      h.reason = attached.error();
      t->failed_.push_back(std::move(h));
      continue;
    }
    t->modules_.push_back(std::move(module));
  }

  t->sample_hz_ = options.sample_hz;
  if (options.sample_hz > 0 && !options.sample_on_demand) {
    auto h = t->hooks();
    if (std::any_of(h.begin(), h.end(),
                    [](const HookStatus& s) { return s.concern == "cpu_samples" && s.active; }))
      t->sampler_ = std::make_unique<CpuSampler>(options.sample_hz);
  }
  t->hot_ = options.hot_hooks;
  t->ring_ = ring_buffer__new(
      m.events,
      [](void* ctx, void* data, size_t size) -> int {
        auto* self = static_cast<LiveTracer*>(ctx);
        if (self->sampler_ && size >= sizeof(ht_cpu_sample_event) &&
            static_cast<const ht_event_header*>(data)->type == HT_EV_CPU_SAMPLE) {
          self->sampler_->add(data, size);  // the sampler's alone: not for the sink
          return 0;
        }
        self->follow_processes(data, size);
        if (self->sink_) (*self->sink_)(data, size);
        return 0;
      },
      t.get(), nullptr);
  if (!t->ring_) return live_error("opening the ring buffer", errno);
  // The concerns are attached: the libraries the traced processes map now
  // reach them.
  for (int tgid : options.tgids) t->mapped_->watch(tgid);
  return t;
}

LiveTracer::~LiveTracer() {
  ring_buffer__free(ring_);
  // Each module's skeleton __destroy detaches its links and closes its
  // programs; the shared maps go with the last fd.
  modules_.clear();
  if (maps_.wake_batches >= 0) close(maps_.wake_batches);
  for (int fd : {maps_.events, maps_.traced_tgids, maps_.counters, maps_.stacks}) {
    if (fd >= 0) close(fd);
  }
}

int LiveTracer::poll(int timeout_ms, const std::function<void(const void* data, size_t size)>& on_record) {
  // ring_buffer__poll hands records to the C callback above, which forwards
  // to whatever sink is current.
  auto sink = on_record;
  sink_ = &sink;
  int n = ring_buffer__poll(ring_, timeout_ms);
  if (n == -EINTR) n = 0;
  // Records are submitted without a wakeup until wakeup_bytes pile up, so
  // epoll may time out with data waiting: drain it too.
  if (n >= 0) {
    int more = ring_buffer__consume(ring_);
    n = more < 0 ? more : n + more;
  }
  sink_ = nullptr;
  mapped_->refresh_due();
  return n;
}

void LiveTracer::follow_processes(const void* data, size_t size) {
  // Nearly every record is something else: only its type is looked at.
  uint32_t type = 0;
  if (size < sizeof(ht_proc_event)) return;
  std::memcpy(&type, static_cast<const char*>(data) + offsetof(ht_event_header, type), sizeof type);
  if (type != HT_EV_PROC_FORK && type != HT_EV_PROC_EXEC) return;
  ht_proc_event e;
  std::memcpy(&e, data, sizeof e);
  if (type == HT_EV_PROC_FORK)
    mapped_->watch(static_cast<int>(e.child_tgid));  // 0 for a new thread: nothing
  else
    mapped_->exec(static_cast<int>(e.hdr.tgid));
  if (type == HT_EV_PROC_EXEC && sampler_) sampler_->forget(static_cast<int>(e.hdr.tgid));
}

void LiveTracer::trace_tgid(int tgid) {
  if (tgid <= 0) return;
  uint32_t key = static_cast<uint32_t>(tgid);
  uint8_t one = 1;
  bpf_map_update_elem(maps_.traced_tgids, &key, &one, BPF_ANY);
  mapped_->watch(tgid);
}

void LiveTracer::untrace_tgid(int tgid) {
  if (tgid <= 0) return;
  uint32_t key = static_cast<uint32_t>(tgid);
  bpf_map_delete_elem(maps_.traced_tgids, &key);
  mapped_->forget(tgid);
}

std::vector<HookStatus> LiveTracer::hooks() const {
  std::vector<HookStatus> out;
  for (const auto& module : modules_) {
    auto h = module->hooks();
    out.insert(out.end(), h.begin(), h.end());
  }
  out.insert(out.end(), failed_.begin(), failed_.end());
  return out;
}

Result<bool> LiveTracer::set_hot_hooks(bool on) {
  if (on == hot_) return true;
  for (const auto& module : modules_) {
    auto done = module->set_hot_hooks(on);
    if (!done) {
      // All or none: the caller goes on as it was.
      for (const auto& m : modules_) m->set_hot_hooks(hot_);
      return done;
    }
  }
  hot_ = on;
  return true;
}

void LiveTracer::set_short_waits(bool on) {
  for (const auto& module : modules_) module->set_short_waits(on);
}

void LiveTracer::notice_mapped_file(int pid, const std::string& path) { mapped_->note_file(pid, path); }

void LiveTracer::contribute(LiveObservation& o) const {
  for (const auto& module : modules_) module->contribute(o);
  o.gpu.cuda_pids.insert(mapped_->cuda_pids().begin(), mapped_->cuda_pids().end());
}

uint64_t LiveTracer::counter(int index) const {
  if (index < 0 || index >= HT_CNT_MAX) return 0;
  int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0) return 0;
  std::vector<uint64_t> values(static_cast<size_t>(ncpus));
  uint32_t key = static_cast<uint32_t>(index);
  if (bpf_map_lookup_elem(maps_.counters, &key, values.data()) != 0) return 0;
  uint64_t sum = 0;
  for (uint64_t v : values) sum += v;
  return sum;
}

bool LiveTracer::set_cpu_sampling(bool on) {
  if (!sample_hz_) return false;
  for (const auto& module : modules_)
    if (std::string(module->name()) == "cpu_samples") {
      if (auto done = module->set_cpu_sampling(on); !done) return false;
      // The ring buffer's callback runs on this thread (poll): no record
      // is being handed to the sampler being replaced.
      if (on) sampler_ = std::make_unique<CpuSampler>(sample_hz_);
      return true;
    }
  return false;
}

CpuSampler::Taken LiveTracer::take_cpu_samples() {
  if (!sampler_) return {};
  return sampler_->take();
}

std::vector<uint64_t> LiveTracer::stack(int32_t stack_id) const {
  std::vector<uint64_t> out;
  if (stack_id < 0) return out;
  uint64_t frames[127] = {};
  uint32_t key = static_cast<uint32_t>(stack_id);
  if (bpf_map_lookup_elem(maps_.stacks, &key, frames) != 0) return out;
  for (uint64_t addr : frames) {
    if (addr == 0) break;
    out.push_back(addr);
  }
  return out;
}

}  // namespace hangtrace
