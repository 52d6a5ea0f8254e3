#include "python_stacks.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "procmem.h"
#include "python_offsets.h"
#include "python_runtime.h"

namespace hangtrace {

using python::FrameLayout;
using python::LineTable;
using python::load_u32;
using python::load_u64;
using python::plausible_pointer;
using python::PyOffsets;

namespace {

constexpr size_t kMaxThreads = 1024;
constexpr size_t kMaxFrames = 256;
constexpr int kWalkAttempts = 3;
constexpr size_t kMaxInterpreters = 64;
constexpr size_t kMaxStringChars = 1024;
constexpr size_t kMaxLineTableBytes = 1 << 20;

// ---- the walk ----------------------------------------------------------------

struct CodeInfo {
  bool ok = false;
  std::string error;
  std::string function, file;
  int first_line = 0;
  std::vector<uint8_t> linetable;
};

class Walker {
 public:
  Walker(const MemoryReader& mem, const PyOffsets& o) : mem_(mem), o_(o) {}

  Result<std::vector<uint8_t>> read(uint64_t addr, size_t n, const char* what) {
    if (!plausible_pointer(addr)) return make_error(fmt::format("bad {} pointer {:#x}", what, addr));
    auto bytes = mem_.read(addr, n);
    if (!bytes) return make_error(fmt::format("cannot read {} at {:#x}", what, addr));
    return bytes;
  }

  Result<uint64_t> read_ptr(uint64_t addr, const char* what) {
    auto b = read(addr, 8, what);
    if (!b) return make_error(b.error());
    return load_u64(*b, 0);
  }

  // tp_name of an object's type, cached by type address.
  std::string type_name(uint64_t object) {
    auto type = read_ptr(object + o_.object_type, "object type");
    if (!type) return "";
    if (auto it = type_names_.find(*type); it != type_names_.end()) return it->second;
    std::string name;
    if (auto name_ptr = read_ptr(*type + o_.type_name, "type name"); name_ptr && *name_ptr >= 4096) {
      for (uint8_t c : mem_.read_prefix(*name_ptr, 64)) {
        if (!c) break;
        name += static_cast<char>(c);
      }
    }
    if (type_names_.size() < 4096) type_names_[*type] = name;
    return name;
  }

  // A str object as UTF-8 (compact strings only, which code objects' names are).
  Result<std::string> read_unicode(uint64_t addr, const char* what) {
    auto head = read(addr, o_.unicode_compact_data, what);
    if (!head) return make_error(head.error());
    uint64_t length = load_u64(*head, o_.unicode_length);
    uint32_t state = load_u32(*head, o_.unicode_state);
    unsigned kind = (state >> 2) & 7;
    bool compact = (state >> 5) & 1;
    bool ascii = (state >> 6) & 1;
    if (!compact) return make_error(fmt::format("{} is not a compact string", what));
    if (kind != 1 && kind != 2 && kind != 4)
      return make_error(fmt::format("{} has string kind {}", what, kind));
    if (length > (uint64_t{1} << 31)) return make_error(fmt::format("{} has length {}", what, length));
    size_t n = std::min<uint64_t>(length, kMaxStringChars);
    uint64_t data = addr + (ascii ? o_.unicode_ascii_data : o_.unicode_compact_data);
    std::string out;
    if (n == 0) return out;
    auto bytes = mem_.read(data, n * kind);
    if (!bytes) return make_error(fmt::format("cannot read {} text", what));
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      uint32_t c = 0;
      if (kind == 1)
        c = (*bytes)[i];
      else if (kind == 2)
        c = static_cast<uint32_t>((*bytes)[2 * i]) | static_cast<uint32_t>((*bytes)[2 * i + 1]) << 8;
      else
        std::memcpy(&c, bytes->data() + 4 * i, 4);
      if (ascii && c >= 0x80) return make_error(fmt::format("{} is not ASCII", what));
      if (c < 0x80) {
        out += static_cast<char>(c);
      } else if (c < 0x800) {
        out += static_cast<char>(0xc0 | (c >> 6));
        out += static_cast<char>(0x80 | (c & 63));
      } else if (c < 0x10000) {
        out += static_cast<char>(0xe0 | (c >> 12));
        out += static_cast<char>(0x80 | ((c >> 6) & 63));
        out += static_cast<char>(0x80 | (c & 63));
      } else if (c < 0x110000) {
        out += static_cast<char>(0xf0 | (c >> 18));
        out += static_cast<char>(0x80 | ((c >> 12) & 63));
        out += static_cast<char>(0x80 | ((c >> 6) & 63));
        out += static_cast<char>(0x80 | (c & 63));
      } else {
        out += '?';
      }
    }
    if (n < length) out += "...";
    return out;
  }

  const CodeInfo& code(uint64_t addr) {
    if (auto it = codes_.find(addr); it != codes_.end()) return it->second;
    CodeInfo info = decode_code(addr);
    if (!info.ok) {  // not cached: the next walk may find a real code object there
      failed_ = std::move(info);
      return failed_;
    }
    if (codes_.size() > 65536) codes_.clear();
    return codes_[addr] = std::move(info);
  }

  CodeInfo decode_code(uint64_t addr) {
    CodeInfo info;
    auto fail = [&](const std::string& why) {
      info.error = why;
      return info;
    };
    auto head = read(addr, o_.code_read_size, "code object");
    if (!head) return fail(head.error());
    if (type_name(addr) != "code") return fail(fmt::format("{:#x} is not a code object", addr));
    auto qualname = read_unicode(load_u64(*head, o_.code_name), o_.minor >= 11 ? "co_qualname" : "co_name");
    if (!qualname) return fail(qualname.error());
    auto filename = read_unicode(load_u64(*head, o_.code_filename), "co_filename");
    if (!filename) return fail(filename.error());
    info.function = std::move(*qualname);
    info.file = std::move(*filename);
    info.first_line = static_cast<int>(load_u32(*head, o_.code_firstlineno));
    uint64_t table = load_u64(*head, o_.code_linetable);
    if (auto tb =
            read(table, o_.bytes_data, o_.line_table == LineTable::Lnotab ? "co_lnotab" : "co_linetable")) {
      uint64_t size = load_u64(*tb, o_.bytes_size);
      if (size <= kMaxLineTableBytes) {
        if (auto data = mem_.read(table + o_.bytes_data, size)) info.linetable = std::move(*data);
      }
    }
    info.ok = true;
    return info;
  }

  int line(const CodeInfo& c, int64_t byte_offset) const {
    if (byte_offset >= (int64_t{1} << 30)) return 0;
    const uint8_t* t = c.linetable.data();
    size_t n = c.linetable.size();
    switch (o_.line_table) {
      case LineTable::Lnotab:
        return python_linetable::lnotab_line(t, n, c.first_line, byte_offset);
      case LineTable::Linetable310:
        return python_linetable::linetable310_line(t, n, c.first_line, byte_offset);
      case LineTable::Locations:
        break;
    }
    return python_linetable::line_for_offset(t, n, c.first_line, byte_offset);
  }

  // The frames of one thread state, innermost first.
  //
  // python_entry: which frames a C-level _PyEval_EvalFrameDefault call began.
  // 3.8-3.10 run every frame in its own eval-loop call. 3.11 flags them
  // (is_entry). 3.12+ instead push a shim frame owned by FRAME_OWNED_BY_CSTACK
  // below the frame the eval loop was called with (the entry frame's
  // `previous` is the shim, the shim's `previous` the caller's frame), so the
  // entry frame is the Python frame just inner to each shim.
  Result<std::vector<UserFrame>> stack(const std::vector<uint8_t>& tstate) {
    std::vector<UserFrame> frames;
    uint64_t frame = 0;
    if (o_.tstate_cframe) {
      uint64_t cframe = load_u64(tstate, o_.tstate_cframe);
      if (cframe == 0) return frames;  // a thread state with no Python code running
      auto current = read_ptr(cframe + o_.cframe_current_frame, "cframe");
      if (!current) return make_error(current.error());
      frame = *current;
    } else {
      frame = load_u64(tstate, o_.tstate_frame);
    }
    bool objects = o_.layout == FrameLayout::FrameObjects;
    std::unordered_set<uint64_t> visited;
    while (frame != 0) {
      if (frames.size() >= kMaxFrames) break;  // deep recursion: keep the innermost
      if (!visited.insert(frame).second) return make_error("frame chain loops");
      auto f = read(frame, o_.frame_read_size, "frame");
      if (!f) return make_error(f.error());
      uint64_t next = load_u64(*f, o_.frame_previous);
      if (objects && type_name(frame) != "frame")
        return make_error(fmt::format("{:#x} is not a frame object", frame));
      if (!objects && o_.owner_cstack >= 0 && (*f)[o_.frame_owner] == o_.owner_cstack) {
        if (!frames.empty()) frames.back().python_entry = true;
        frame = next;
        continue;
      }
      uint64_t code_addr = load_u64(*f, o_.frame_code);
      const CodeInfo& c = code(code_addr);
      if (!c.ok) return make_error(c.error);
      int64_t offset = 0;
      if (objects) {
        // f_lasti: the last instruction started, -1 before the first.
        offset = static_cast<int64_t>(static_cast<int32_t>(load_u32(*f, o_.frame_lasti))) * o_.lasti_unit;
      } else {
        uint64_t instr = load_u64(*f, o_.frame_prev_instr);
        offset = static_cast<int64_t>(instr - (code_addr + o_.code_adaptive));
      }
      UserFrame uf;
      uf.kind = UserFrame::Kind::Python;
      uf.function = c.function;
      uf.file = c.file;
      uf.line = line(c, offset);
      uf.python_entry = objects || (o_.frame_is_entry && (*f)[o_.frame_is_entry] != 0);
      frames.push_back(std::move(uf));
      frame = next;
    }
    return frames;
  }

 private:
  const MemoryReader& mem_;
  const PyOffsets& o_;
  std::unordered_map<uint64_t, CodeInfo> codes_;
  CodeInfo failed_;
  std::unordered_map<uint64_t, std::string> type_names_;
};

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
    return make_error(fmt::format("CPython {}.{} ({}) is not supported (3.8 to 3.13 are)", loc.major,
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
  return walk_python_threads(p, mem, *offsets, loc->runtime);
}

std::string walk_python_threads(ProcessInfo& p, const MemoryReader& mem, const PyOffsets& o,
                                uint64_t runtime_addr) {
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

  std::unordered_map<int, ThreadInfo*> by_tid;
  std::unordered_set<int> tids;
  for (auto& t : p.threads) {
    by_tid[t.tid] = &t;
    tids.insert(t.tid);
  }

  // 3.12+: each interpreter's own GIL.
  auto note_gil = [&](const std::vector<uint8_t>& is) {
    if (!o.interp_gil) return;
    uint64_t gil = load_u64(is, o.interp_gil);
    auto g = walker.read(gil, std::max(o.gil_last_holder + 8, o.gil_locked + 4), "GIL");
    if (!g) return;
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

  for (size_t i = 0; i < tstates.size(); ++i) {
    auto it = by_tid.find(tstate_tids[i]);
    if (tstate_tids[i] == 0 || it == by_tid.end()) continue;
    ThreadInfo& t = *it->second;
    t.holds_gil = gil_holders.count(tstates[i].addr) > 0;
    auto frames = walk_thread(walker, o, tstates[i]);
    if (frames) {
      t.python_stack = std::move(*frames);
      t.python_stack_error.clear();
    } else {
      t.python_stack.clear();
      t.python_stack_error = stack_error(frames.error());
    }
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
  uint64_t last_scan_ns = 0;
  bool scanned = false;
  std::string scan_error;

  // Re-reads the interpreters' thread lists (bounded: kMaxThreads).
  void scan(uint64_t now_ns) {
    last_scan_ns = now_ns;
    scanned = true;
    tstates.clear();
    uint64_t size = o.runtime_interpreters_head + 8;
    auto rt = walker->read(runtime, size, "_PyRuntime");
    if (!rt) {
      scan_error = rt.error();
      return;
    }
    ThreadStates states = read_thread_states(*walker, o, load_u64(*rt, o.runtime_interpreters_head));
    scan_error =
        states.interpreters == 0 ? "no interpreter (not initialized yet, or finalized)" : states.first_error;
    std::unordered_set<int> tids;
    if (!o.tstate_native_thread_id) {
      if (auto t = fs.tids(pid)) tids.insert(t->begin(), t->end());
    }
    std::vector<int> ids = thread_state_tids(*mem, o, states.tstates, tids);
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] > 0) tstates.emplace(ids[i], states.tstates[i].addr);
  }

  // The thread state of `tid` read now, if it still names `tid`.
  std::optional<TState> read_tstate(int tid) {
    auto it = tstates.find(tid);
    if (it == tstates.end()) return std::nullopt;
    auto bytes = walker->read(it->second, o.tstate_read_size, "thread state");
    if (!bytes) return std::nullopt;
    if (o.tstate_native_thread_id && static_cast<int>(load_u64(*bytes, o.tstate_native_thread_id)) != tid)
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
