#include "python_stacks.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "procmem.h"
#include "python_asyncio.h"
#include "python_locks.h"
#include "python_offsets.h"
#include "python_runtime.h"
#include "python_walker.h"

namespace hangtrace {

using python::FrameLayout;
using python::LineTable;
using python::load_u32;
using python::load_u64;
using python::plausible_pointer;
using python::PyOffsets;

namespace {

constexpr size_t kMaxThreads = 1024;
constexpr int kWalkAttempts = 3;
constexpr size_t kMaxInterpreters = 64;

using python::Walker;

std::string stack_error(const std::string& reason) { return "failed to read Python stack: " + reason; }

// The layout of the interpreter `loc` found in `pid`.
Result<PyOffsets> offsets_of(const python::RuntimeLocation& loc, const MemoryReader& mem) {
  std::optional<PyOffsets> offsets = python::offsets_for(loc.major, loc.minor);
  if (!offsets && loc.major == 3 && loc.minor >= 13) {
    auto debug = python::offsets_from_debug(mem, loc.runtime, loc.major, loc.minor);
    if (!debug)
      return make_error(fmt::format("CPython {}.{} ({}) is not supported: {}", loc.major, loc.minor,
                                    loc.binary, debug.error()));
    offsets = std::move(*debug);
  }
  if (!offsets)
    return make_error(fmt::format("CPython {}.{} ({}) is not supported (3.8 to 3.15 are)", loc.major,
                                  loc.minor, loc.binary));
  return *offsets;
}

// ---- pthread_t -> Linux TID (3.8-3.10) --------------------------------------

// Before 3.11 a thread state knows its thread only as a pthread_t, which with
// glibc (and musl) is the address of the thread's struct pthread; that struct
// holds the kernel TID at a libc-private offset: 0x2d0 in glibc x86_64 since
// 2.x (nptl/descr.h: after the tcbhead_t header and the list link). Rather
// than trust that, the offset is the one at which the thread states' structs
// hold distinct TIDs of this process for as many thread states as any other
// offset does, 0x2d0 winning ties; an offset found only by the scan must
// match at least two thread states, so that one stray value equal to a TID
// cannot decide it. Returns one TID (0: unknown) per pthread_t.
constexpr uint64_t kGlibcPthreadTid = 0x2d0;
constexpr size_t kPthreadScanBytes = 2048;

std::vector<int> pthread_tids(const MemoryReader& mem, const std::vector<uint64_t>& pthreads,
                              const std::unordered_set<int>& tids) {
  std::vector<int> out(pthreads.size(), 0);
  std::vector<std::vector<uint8_t>> structs;
  for (uint64_t p : pthreads)
    structs.push_back(plausible_pointer(p) ? mem.read_prefix(p, kPthreadScanBytes) : std::vector<uint8_t>{});
  auto tid_at = [&](size_t i, uint64_t off) -> int {
    if (off + 4 > structs[i].size()) return 0;
    int v = static_cast<int>(load_u32(structs[i], off));
    return tids.count(v) ? v : 0;
  };
  auto score = [&](uint64_t off) {
    std::unordered_set<int> seen;
    for (size_t i = 0; i < structs.size(); ++i) {
      int v = tid_at(i, off);
      if (v && !seen.insert(v).second) return 0;  // two threads, one TID: not the tid field
    }
    return static_cast<int>(seen.size());
  };
  uint64_t best = 0;
  int best_score = score(kGlibcPthreadTid);
  if (best_score > 0) best = kGlibcPthreadTid;
  for (uint64_t off = 0; off + 4 <= kPthreadScanBytes; off += 4) {
    if (off == kGlibcPthreadTid) continue;
    int s = score(off);
    if (s >= 2 && s > best_score) {
      best = off;
      best_score = s;
    }
  }
  if (best_score == 0) return out;
  for (size_t i = 0; i < structs.size(); ++i) out[i] = tid_at(i, best);
  return out;
}

// ---- thread states ------------------------------------------------------------

struct TState {
  uint64_t addr;
  std::vector<uint8_t> bytes;
};

struct ThreadStates {
  std::vector<TState> tstates;
  size_t interpreters = 0;  // 0: no interpreter (not initialized yet, or finalized)
  std::vector<uint64_t> interpreter_states;
  std::string first_error;
};

// Every interpreter's thread states from `interp` on (_PyRuntime's
// interpreters.head), bounded; `on_interp` sees each interpreter state's bytes.
ThreadStates read_thread_states(Walker& walker, const PyOffsets& o, uint64_t interp,
                                const std::function<void(const std::vector<uint8_t>&)>& on_interp = {}) {
  ThreadStates out;
  uint64_t interp_size = std::max({o.interp_next, o.interp_threads_head, o.interp_gil}) + 8;
  std::unordered_set<uint64_t> seen_interps, seen_threads;
  while (interp != 0 && seen_interps.size() < kMaxInterpreters) {
    if (!seen_interps.insert(interp).second) break;
    auto is = walker.read(interp, interp_size, "interpreter state");
    if (!is) {
      if (out.first_error.empty()) out.first_error = is.error();
      break;
    }
    if (on_interp) on_interp(*is);
    out.interpreter_states.push_back(interp);
    uint64_t tstate = load_u64(*is, o.interp_threads_head);
    while (tstate != 0 && out.tstates.size() < kMaxThreads) {
      if (!seen_threads.insert(tstate).second) break;
      auto ts = walker.read(tstate, o.tstate_read_size, "thread state");
      if (!ts) {
        if (out.first_error.empty()) out.first_error = ts.error();
        break;
      }
      uint64_t next = load_u64(*ts, o.tstate_next);
      out.tstates.push_back({tstate, std::move(*ts)});
      tstate = next;
    }
    interp = load_u64(*is, o.interp_next);
  }
  out.interpreters = seen_interps.size();
  return out;
}

// The thread (Linux TID, 0: unknown) of each thread state; `tids`: the
// process's threads, for versions that know a thread only by its pthread_t.
std::vector<int> thread_state_tids(const MemoryReader& mem, const PyOffsets& o,
                                   const std::vector<TState>& tstates, const std::unordered_set<int>& tids) {
  std::vector<int> out;
  if (o.tstate_native_thread_id) {
    for (const auto& ts : tstates)
      out.push_back(static_cast<int>(load_u64(ts.bytes, o.tstate_native_thread_id)));
    return out;
  }
  std::vector<uint64_t> pthreads;
  for (const auto& ts : tstates) pthreads.push_back(load_u64(ts.bytes, o.tstate_thread_id));
  return pthread_tids(mem, pthreads, tids);
}

// A running thread pushes and pops frames while we read: a walk that ran
// into a freed frame is tried again on a fresh thread state.
Result<std::vector<UserFrame>> walk_thread(Walker& walker, const PyOffsets& o, const TState& ts) {
  auto frames = walker.stack(ts.bytes);
  for (int attempt = 1; attempt < kWalkAttempts && !frames; ++attempt) {
    auto again = walker.read(ts.addr, o.tstate_read_size, "thread state");
    if (again) frames = walker.stack(*again);
  }
  return frames;
}

}  // namespace

namespace {

// Every thread of `p` gets `reason` instead of a stack.
std::string fail_all(ProcessInfo& p, const std::string& reason) {
  p.python_gils.clear();
  for (auto& t : p.threads) {
    t.python_stack.clear();
    t.python_stack_error = stack_error(reason);
    t.holds_gil = false;
  }
  return reason;
}

}  // namespace

std::string collect_python_stacks(ProcessInfo& p, const procfs::ProcFs& fs, int pid, bool use_symbols,
                                  const std::vector<Mapping>* maps) {
  p.python_gils.clear();
  auto loc = python::find_runtime(fs, pid, use_symbols, maps);
  if (!loc) return fail_all(p, loc.error());
  ProcessMemory mem(pid);
  auto offsets = offsets_of(*loc, mem);
  if (!offsets) return fail_all(p, offsets.error());
  p.python_interpreter =
      fmt::format("CPython {}{}",
                  offsets->version_hex ? python::version_name(offsets->version_hex)
                                       : fmt::format("{}.{}.{}", loc->major, loc->minor, loc->micro),
                  offsets->free_threaded ? " (free-threaded)" : "");
  // asyncio's tasks: 3.14+ where the _asyncio module (loaded) says, else
  // from the asyncio module's registries.
  uint64_t asyncio_debug = 0;
  if (offsets->gen_iframe && offsets->minor >= 14) {
    std::vector<Mapping> own_maps;
    if (!maps) {
      if (auto read = fs.maps(pid)) own_maps = std::move(*read);
    }
    if (auto found = python::find_asyncio_debug(fs, pid, maps ? *maps : own_maps)) asyncio_debug = *found;
  }
  return walk_python_threads(p, mem, *offsets, loc->runtime, asyncio_debug);
}

std::string walk_python_threads(ProcessInfo& p, const MemoryReader& mem, const PyOffsets& o,
                                uint64_t runtime_addr, uint64_t asyncio_debug) {
  p.python_gils.clear();
  Walker walker(mem, o);
  uint64_t runtime_size = std::max(o.runtime_interpreters_head + 8, o.runtime_gil_locked + 4);
  auto runtime = walker.read(runtime_addr, runtime_size, "_PyRuntime");
  if (!runtime) return fail_all(p, runtime.error());
  // Thread states holding a GIL (one per GIL: 3.12+ interpreters may each
  // have their own). `locked` is -1 before the GIL exists.
  std::unordered_set<uint64_t> gil_holders;
  if (o.runtime_gil_locked && static_cast<int32_t>(load_u32(*runtime, o.runtime_gil_locked)) == 1)
    gil_holders.insert(load_u64(*runtime, o.runtime_gil_last_holder));
  // Before 3.12 the one GIL is _PyRuntime.ceval.gil, whose `interval` comes
  // right before last_holder.
  if (o.runtime_gil_last_holder >= 8) p.python_gils.push_back(runtime_addr + o.runtime_gil_last_holder - 8);

  // Inside a pid namespace (a container) the interpreter and libc know a
  // thread by its id there, NSpid's last: matched by that, then named by
  // the host's.
  std::unordered_map<int, ThreadInfo*> by_tid;
  std::unordered_map<int, int> host_tid_of;  // the id the process sees -> the host's
  std::unordered_set<int> tids;              // the ids the process sees
  for (auto& t : p.threads) {
    by_tid[t.tid] = &t;
    const int seen = t.ns_tid ? t.ns_tid : t.tid;
    host_tid_of[seen] = t.tid;
    tids.insert(seen);
  }

  // 3.12+: each interpreter's own GIL.
  // A free-threaded build runs without one unless something turned it on.
  auto note_gil = [&](const std::vector<uint8_t>& is) {
    if (!o.interp_gil) return;
    uint64_t gil = load_u64(is, o.interp_gil);
    auto g = walker.read(gil, std::max({o.gil_last_holder + 8, o.gil_locked + 4, o.gil_enabled + 4}), "GIL");
    if (!g) return;
    if (o.gil_switchable && static_cast<int32_t>(load_u32(*g, o.gil_enabled)) <= 0) return;
    if (std::find(p.python_gils.begin(), p.python_gils.end(), gil) == p.python_gils.end())
      p.python_gils.push_back(gil);
    if (static_cast<int32_t>(load_u32(*g, o.gil_locked)) == 1)
      gil_holders.insert(load_u64(*g, o.gil_last_holder));
  };
  ThreadStates states =
      read_thread_states(walker, o, load_u64(*runtime, o.runtime_interpreters_head), note_gil);
  if (states.interpreters == 0) return fail_all(p, "no interpreter (not initialized yet, or finalized)");
  gil_holders.erase(0);
  const std::vector<TState>& tstates = states.tstates;
  const std::string& first_error = states.first_error;
  std::vector<int> tstate_tids = thread_state_tids(mem, o, tstates, tids);
  for (int& id : tstate_tids) {
    auto host = host_tid_of.find(id);
    id = host == host_tid_of.end() ? 0 : host->second;
  }

  for (size_t i = 0; i < tstates.size(); ++i) {
    auto it = by_tid.find(tstate_tids[i]);
    if (tstate_tids[i] == 0 || it == by_tid.end()) continue;
    ThreadInfo& t = *it->second;
    t.holds_gil = gil_holders.count(tstates[i].addr) > 0;
    // 3.15 keeps the thread's own word for it, the interpreter's source of
    // truth; it agrees with _gil.last_holder whenever the GIL is locked.
    if (o.tstate_holds_gil && !p.python_gils.empty())
      t.holds_gil = static_cast<int32_t>(load_u32(tstates[i].bytes, o.tstate_holds_gil)) == 1;
    auto frames = walk_thread(walker, o, tstates[i]);
    if (frames) {
      t.python_stack = std::move(*frames);
      t.python_stack_error.clear();
    } else {
      t.python_stack.clear();
      t.python_stack_error = stack_error(frames.error());
    }
  }
  std::unordered_map<uint64_t, int> tid_of_pthread;
  std::vector<std::pair<uint64_t, int>> thread_states;
  for (size_t i = 0; i < tstates.size(); ++i) {
    if (tstate_tids[i] <= 0) continue;
    thread_states.emplace_back(tstates[i].addr, tstate_tids[i]);
    if (o.tstate_thread_id)
      tid_of_pthread.emplace(load_u64(tstates[i].bytes, o.tstate_thread_id), tstate_tids[i]);
  }
  python::find_lock_waits(p, walker, tid_of_pthread);
  p.asyncio_tasks.clear();
  p.asyncio_error.clear();
  if (asyncio_debug) {
    auto a = python::read_asyncio_offsets(mem, asyncio_debug, o);
    if (a)
      python::read_asyncio_tasks(p, walker, *a, thread_states, states.interpreter_states);
    else
      p.asyncio_error = a.error();
  } else {
    python::read_asyncio_registry(p, walker, states.interpreter_states, tid_of_pthread);
  }
  return first_error;
}

// ---- one thread at a time (the sampler) ---------------------------------------

struct PythonThreadStacks::Impl {
  int pid = 0;
  uint64_t runtime = 0;
  PyOffsets o;
  std::unique_ptr<ProcessMemory> mem;
  std::unique_ptr<Walker> walker;  // over `mem` and `o`: declared after them
  procfs::ProcFs fs;
  std::unordered_map<int, uint64_t> tstates;  // tid -> its PyThreadState, as of the last scan
  std::unordered_map<int, int> ns_tid_of;     // host tid -> its id in the process's pid namespace
  uint64_t last_scan_ns = 0;
  bool scanned = false;
  std::string scan_error;

  // Re-reads the interpreters' thread lists (bounded: kMaxThreads).
  void scan(uint64_t now_ns) {
    last_scan_ns = now_ns;
    scanned = true;
    tstates.clear();
    ns_tid_of.clear();
    uint64_t size = o.runtime_interpreters_head + 8;
    auto rt = walker->read(runtime, size, "_PyRuntime");
    if (!rt) {
      scan_error = rt.error();
      return;
    }
    ThreadStates states = read_thread_states(*walker, o, load_u64(*rt, o.runtime_interpreters_head));
    scan_error =
        states.interpreters == 0 ? "no interpreter (not initialized yet, or finalized)" : states.first_error;
    // The ids the process sees, and the host's for each (they differ in a
    // pid namespace: see walk_python_threads).
    std::unordered_set<int> tids;
    std::unordered_map<int, int> host_tid_of;
    const bool in_namespace = [&] {
      auto st = fs.status(pid);
      return st && st->ns_pids.size() > 1;
    }();
    if (!o.tstate_native_thread_id || in_namespace) {
      if (auto t = fs.tids(pid)) {
        for (size_t i = 0; i < t->size() && i < kMaxThreads; ++i) {
          int seen = (*t)[i];
          if (in_namespace) {
            auto st = fs.thread_status(pid, (*t)[i]);
            if (!st || st->ns_pids.size() <= 1) continue;
            seen = st->ns_pids.back();
          }
          tids.insert(seen);
          host_tid_of[seen] = (*t)[i];
        }
      }
    }
    std::vector<int> ids = thread_state_tids(*mem, o, states.tstates, tids);
    for (size_t i = 0; i < ids.size(); ++i) {
      int id = ids[i];
      if (in_namespace) {
        auto host = host_tid_of.find(id);
        id = host == host_tid_of.end() ? 0 : host->second;
      }
      if (id > 0) tstates.emplace(id, states.tstates[i].addr);
      if (id > 0 && in_namespace) ns_tid_of[id] = ids[i];
    }
  }

  // The thread state of `tid` read now, if it still names `tid`.
  std::optional<TState> read_tstate(int tid) {
    auto it = tstates.find(tid);
    if (it == tstates.end()) return std::nullopt;
    auto bytes = walker->read(it->second, o.tstate_read_size, "thread state");
    if (!bytes) return std::nullopt;
    if (o.tstate_native_thread_id && static_cast<int>(load_u64(*bytes, o.tstate_native_thread_id)) !=
                                         (ns_tid_of.count(tid) ? ns_tid_of.at(tid) : tid))
      return std::nullopt;  // freed and reused for another thread
    return TState{it->second, std::move(*bytes)};
  }
};

Result<std::unique_ptr<PythonThreadStacks>> PythonThreadStacks::open(const procfs::ProcFs& fs, int pid,
                                                                     const std::vector<Mapping>* maps) {
  auto loc = python::find_runtime(fs, pid, true, maps);
  if (!loc) return make_error(loc.error());
  ProcessMemory mem(pid);
  auto offsets = offsets_of(*loc, mem);
  if (!offsets) return make_error(offsets.error());
  std::unique_ptr<PythonThreadStacks> out(new PythonThreadStacks());
  out->impl_ = std::make_unique<Impl>();
  Impl& m = *out->impl_;
  m.pid = pid;
  m.runtime = loc->runtime;
  m.o = std::move(*offsets);
  m.mem = std::make_unique<ProcessMemory>(pid);
  m.walker = std::make_unique<Walker>(*m.mem, m.o);
  m.fs = fs;
  return out;
}

PythonThreadStacks::PythonThreadStacks() = default;
PythonThreadStacks::~PythonThreadStacks() = default;

Result<std::vector<UserFrame>> PythonThreadStacks::stack(int tid, uint64_t now_ns) {
  Impl& m = *impl_;
  std::optional<TState> ts = m.read_tstate(tid);
  if (!ts && (!m.scanned || now_ns - m.last_scan_ns >= kRescanNs)) {
    m.scan(now_ns);
    ts = m.read_tstate(tid);
  }
  if (!ts) {
    if (!m.scan_error.empty()) return make_error(stack_error(m.scan_error));
    return make_error("no Python thread state");
  }
  auto frames = walk_thread(*m.walker, m.o, *ts);
  if (!frames) return make_error(stack_error(frames.error()));
  return frames;
}

}  // namespace hangtrace
