#include "python_stacks.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fmt/format.h>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "hangtrace/procfs.h"
#include "procmem.h"

namespace hangtrace {

namespace {

constexpr size_t kMaxThreads = 1024;
constexpr size_t kMaxFrames = 256;
constexpr int kWalkAttempts = 3;
constexpr size_t kMaxInterpreters = 64;
constexpr size_t kMaxStringChars = 1024;
constexpr size_t kMaxLineTableBytes = 1 << 20;
constexpr size_t kMaxMapsBytes = size_t{64} << 20;

// Where the fields the walk needs live, for one CPython minor version on
// x86_64 (LP64). 0 means "this version has no such field".
struct PyOffsets {
  int major = 3, minor = 0;
  // _PyRuntime
  uint64_t runtime_interpreters_head = 0;
  uint64_t runtime_gil_last_holder = 0;  // _PyRuntime.ceval.gil.last_holder
  uint64_t runtime_gil_locked = 0;       // _PyRuntime.ceval.gil.locked
  // PyInterpreterState
  uint64_t interp_next = 0;
  uint64_t interp_threads_head = 0;
  // PyThreadState
  uint64_t tstate_next = 0;
  uint64_t tstate_native_thread_id = 0;
  uint64_t tstate_cframe = 0;         // 3.11/3.12: tstate->cframe
  uint64_t cframe_current_frame = 0;  // _PyCFrame.current_frame
  uint64_t tstate_read_size = 0;
  // _PyInterpreterFrame
  uint64_t frame_code = 0;
  uint64_t frame_previous = 0;
  uint64_t frame_prev_instr = 0;
  uint64_t frame_owner = 0;
  int owner_cstack = -1;  // FRAME_OWNED_BY_CSTACK (3.12+), -1 when none
  uint64_t frame_read_size = 0;
  // PyCodeObject
  uint64_t code_filename = 0;
  uint64_t code_qualname = 0;
  uint64_t code_firstlineno = 0;
  uint64_t code_linetable = 0;
  uint64_t code_adaptive = 0;  // co_code_adaptive: the instructions, inline
  uint64_t code_read_size = 0;
  // Objects
  uint64_t object_type = 8;            // ob_type
  uint64_t type_name = 24;             // PyTypeObject.tp_name
  uint64_t unicode_length = 16;        // PyASCIIObject.length
  uint64_t unicode_state = 32;         // PyASCIIObject.state
  uint64_t unicode_ascii_data = 48;    // sizeof(PyASCIIObject)
  uint64_t unicode_compact_data = 72;  // sizeof(PyCompactUnicodeObject)
  uint64_t bytes_size = 16;            // ob_size
  uint64_t bytes_data = 32;            // ob_sval
};

// CPython 3.11, measured with gdb on Debian's python3.11 3.11.2 (python3.11-dbg
// symbols): `p &((struct _ts*)0)->native_thread_id` etc.
PyOffsets offsets_311() {
  PyOffsets o;
  o.minor = 11;
  o.runtime_interpreters_head = 40;
  o.runtime_gil_last_holder = 368;
  o.runtime_gil_locked = 376;
  o.interp_next = 0;
  o.interp_threads_head = 16;
  o.tstate_next = 8;
  o.tstate_native_thread_id = 160;
  o.tstate_cframe = 56;
  o.cframe_current_frame = 8;
  o.tstate_read_size = 168;
  o.frame_code = 32;
  o.frame_previous = 48;
  o.frame_prev_instr = 56;
  o.frame_owner = 69;
  o.owner_cstack = -1;  // 3.11 has no shim frames (is_entry marks C entry)
  o.frame_read_size = 72;
  o.code_filename = 112;
  o.code_qualname = 128;
  o.code_firstlineno = 72;
  o.code_linetable = 136;
  o.code_adaptive = 184;
  o.code_read_size = 144;
  return o;
}

std::optional<PyOffsets> offsets_for(int major, int minor) {
  if (major == 3 && minor == 11) return offsets_311();
  return std::nullopt;
}

uint64_t load_u64(const std::vector<uint8_t>& b, uint64_t off) {
  uint64_t v = 0;
  if (off + 8 <= b.size()) std::memcpy(&v, b.data() + off, 8);
  return v;
}

uint32_t load_u32(const std::vector<uint8_t>& b, uint64_t off) {
  uint32_t v = 0;
  if (off + 4 <= b.size()) std::memcpy(&v, b.data() + off, 4);
  return v;
}

// A user-space pointer that could be an object: non-null, canonical, aligned.
bool plausible_pointer(uint64_t p) { return p >= 4096 && p < (uint64_t{1} << 47) && p % 8 == 0; }

// ---- ELF: _PyRuntime and Py_Version ---------------------------------------

struct ElfInfo {
  bool ok = false;
  std::string error;
  uint64_t runtime = 0;  // st_value of _PyRuntime (unrelocated)
  uint64_t version = 0;  // st_value of Py_Version, 0 if absent (< 3.11)
  bool is_dyn = false;
  struct Load {
    uint64_t vaddr, offset, filesz;
  };
  std::vector<Load> loads;
};

ElfInfo read_elf(const std::string& path) {
  ElfInfo info;
  if (elf_version(EV_CURRENT) == EV_NONE) {
    info.error = "libelf is unusable";
    return info;
  }
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    info.error = fmt::format("cannot open {}: {}", path, std::strerror(errno));
    return info;
  }
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  if (!elf || elf_kind(elf) != ELF_K_ELF) {
    info.error = fmt::format("{} is not an ELF file", path);
    if (elf) elf_end(elf);
    close(fd);
    return info;
  }
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf, &ehdr)) info.is_dyn = ehdr.e_type == ET_DYN;
  size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) == 0) {
    for (size_t i = 0; i < phnum && i < 256; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD)
        info.loads.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz});
    }
  }
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr && (!info.runtime || !info.version)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    if (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) continue;
    if (sh.sh_entsize == 0) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data) continue;
    size_t count = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < count; ++i) {
      GElf_Sym sym;
      if (!gelf_getsym(data, static_cast<int>(i), &sym) || sym.st_value == 0) continue;
      const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
      if (!name) continue;
      if (!info.runtime && std::strcmp(name, "_PyRuntime") == 0) info.runtime = sym.st_value;
      if (!info.version && std::strcmp(name, "Py_Version") == 0) info.version = sym.st_value;
    }
  }
  elf_end(elf);
  close(fd);
  info.ok = info.runtime != 0;
  if (!info.ok) info.error = fmt::format("no _PyRuntime symbol in {}", path);
  return info;
}

// Parsed ELF files, by device + inode + size + mtime: DataLoader workers all
// map the same binary.
std::mutex elf_cache_mutex;
std::map<std::tuple<dev_t, ino_t, off_t, time_t>, ElfInfo> elf_cache;

// `inode`: the mapping's, so that a binary replaced on disk since the process
// started is not mistaken for the one it runs.
ElfInfo cached_elf(const std::string& path, uint64_t inode) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    ElfInfo info;
    info.error = fmt::format("cannot examine {}: {}", path, std::strerror(errno));
    return info;
  }
  if (inode && st.st_ino != inode) {
    ElfInfo info;
    info.error = fmt::format("{} is not the file the process mapped (replaced on disk?)", path);
    return info;
  }
  auto key = std::make_tuple(st.st_dev, st.st_ino, st.st_size, st.st_mtime);
  {
    std::lock_guard lock(elf_cache_mutex);
    if (auto it = elf_cache.find(key); it != elf_cache.end()) return it->second;
  }
  ElfInfo info = read_elf(path);
  std::lock_guard lock(elf_cache_mutex);
  if (elf_cache.size() > 64) elf_cache.clear();
  elf_cache.emplace(key, info);
  return info;
}

// "libpython3.11.so.1.0" / "python3.11" -> {3, 11}.
std::optional<std::pair<int, int>> version_from_name(const std::string& path) {
  std::string base = path.substr(path.rfind('/') + 1);
  size_t at = base.find("python");
  if (at == std::string::npos) return std::nullopt;
  int major = 0, minor = 0;
  if (std::sscanf(base.c_str() + at, "python%d.%d", &major, &minor) == 2) return std::make_pair(major, minor);
  return std::nullopt;
}

struct RuntimeLocation {
  uint64_t runtime = 0;  // relocated address of _PyRuntime
  int major = 0, minor = 0, micro = 0;
  std::string binary;
};

bool python_file(const std::string& path) {
  std::string base = path.substr(path.rfind('/') + 1);
  return base.rfind("libpython", 0) == 0 || base.rfind("python", 0) == 0;
}

Result<RuntimeLocation> find_runtime(int mem_pid, const std::string& proc_dir) {
  auto text = procfs::read_text_file(proc_dir + "/maps", nullptr, kMaxMapsBytes);
  if (!text) return make_error(fmt::format("no memory maps: {}", text.error()));
  auto maps = procfs::parse_maps(*text);
  if (!maps) return make_error(fmt::format("memory maps unreadable: {}", maps.error()));
  // Candidate files, libpython first (a python linked against it has no
  // _PyRuntime of its own), each with its lowest mapping.
  std::vector<const Mapping*> candidates;
  std::set<std::string> seen;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& m : *maps) {
      if (m.path.empty() || m.path[0] != '/' || !python_file(m.path)) continue;
      std::string base = m.path.substr(m.path.rfind('/') + 1);
      if ((base.rfind("libpython", 0) == 0) != (pass == 0)) continue;
      if (!seen.insert(m.path).second) continue;
      candidates.push_back(&m);
    }
  }
  if (candidates.empty()) return make_error("no python binary or libpython mapped");
  std::string last_error;
  for (const Mapping* first : candidates) {
    const Mapping* lowest = first;
    for (const auto& m : *maps)
      if (m.path == first->path && m.offset < lowest->offset) lowest = &m;
    std::string file = proc_dir + "/root" + first->path;
    ElfInfo elf = cached_elf(file, lowest->inode);
    if (!elf.ok) {
      // The path may not resolve (another mount namespace, a deleted or
      // replaced file); map_files opens what is mapped.
      elf = cached_elf(fmt::format("{}/map_files/{:x}-{:x}", proc_dir, lowest->start, lowest->end),
                       lowest->inode);
    }
    if (!elf.ok) {
      last_error = elf.error;
      continue;
    }
    uint64_t bias = 0;
    if (elf.is_dyn) {
      const ElfInfo::Load* load = nullptr;
      for (const auto& l : elf.loads)
        if (lowest->offset >= (l.offset & ~uint64_t{4095}) && lowest->offset < l.offset + l.filesz) {
          load = &l;
          break;
        }
      if (!load) {
        last_error = fmt::format("{}: no loadable segment at offset {:#x}", first->path, lowest->offset);
        continue;
      }
      // The address the mapping's first byte has in the file's own layout.
      uint64_t file_vaddr = load->vaddr - load->offset + lowest->offset;
      bias = lowest->start - file_vaddr;
    }
    RuntimeLocation loc;
    loc.runtime = elf.runtime + bias;
    loc.binary = first->path;
    bool mapped = false;
    for (const auto& m : *maps) mapped = mapped || (loc.runtime >= m.start && loc.runtime < m.end);
    if (!mapped) {
      last_error = fmt::format("_PyRuntime of {} at {:#x} is not mapped", first->path, loc.runtime);
      continue;
    }
    if (elf.version) {
      auto v = read_process_u32(mem_pid, elf.version + bias);
      if (!v) {
        last_error = fmt::format("cannot read Py_Version of {}", first->path);
        continue;
      }
      loc.major = (*v >> 24) & 0xff;
      loc.minor = (*v >> 16) & 0xff;
      loc.micro = (*v >> 8) & 0xff;
    } else if (auto v = version_from_name(first->path)) {
      loc.major = v->first;
      loc.minor = v->second;
    } else {
      last_error = fmt::format("the CPython version of {} is unknown", first->path);
      continue;
    }
    return loc;
  }
  return make_error(last_error);
}

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
  Walker(int pid, const PyOffsets& o) : pid_(pid), o_(o) {}

  Result<std::vector<uint8_t>> read(uint64_t addr, size_t n, const char* what) {
    if (!plausible_pointer(addr)) return make_error(fmt::format("bad {} pointer {:#x}", what, addr));
    auto bytes = read_process_memory(pid_, addr, n);
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
      for (uint8_t c : read_process_memory_prefix(pid_, *name_ptr, 64)) {
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
    auto bytes = read_process_memory(pid_, data, n * kind);
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
    auto qualname = read_unicode(load_u64(*head, o_.code_qualname), "co_qualname");
    if (!qualname) return fail(qualname.error());
    auto filename = read_unicode(load_u64(*head, o_.code_filename), "co_filename");
    if (!filename) return fail(filename.error());
    info.function = std::move(*qualname);
    info.file = std::move(*filename);
    info.first_line = static_cast<int>(load_u32(*head, o_.code_firstlineno));
    uint64_t table = load_u64(*head, o_.code_linetable);
    if (auto tb = read(table, o_.bytes_data, "co_linetable")) {
      uint64_t size = load_u64(*tb, o_.bytes_size);
      if (size <= kMaxLineTableBytes) {
        if (auto data = read_process_memory(pid_, table + o_.bytes_data, size))
          info.linetable = std::move(*data);
      }
    }
    info.ok = true;
    return info;
  }

  // The frames of one thread state, innermost first.
  Result<std::vector<UserFrame>> stack(uint64_t tstate_addr, const std::vector<uint8_t>& tstate) {
    std::vector<UserFrame> frames;
    uint64_t cframe = load_u64(tstate, o_.tstate_cframe);
    if (cframe == 0) return frames;  // a thread state with no Python code running
    auto current = read_ptr(cframe + o_.cframe_current_frame, "cframe");
    if (!current) return make_error(current.error());
    uint64_t frame = *current;
    std::unordered_set<uint64_t> visited;
    while (frame != 0) {
      if (frames.size() >= kMaxFrames) break;  // deep recursion: keep the innermost
      if (!visited.insert(frame).second) return make_error("frame chain loops");
      auto f = read(frame, o_.frame_read_size, "frame");
      if (!f) return make_error(f.error());
      uint8_t owner = (*f)[o_.frame_owner];
      uint64_t next = load_u64(*f, o_.frame_previous);
      if (o_.owner_cstack >= 0 && owner == o_.owner_cstack) {
        frame = next;
        continue;
      }
      uint64_t code_addr = load_u64(*f, o_.frame_code);
      const CodeInfo& c = code(code_addr);
      if (!c.ok) return make_error(c.error);
      uint64_t instr = load_u64(*f, o_.frame_prev_instr);
      int64_t offset = static_cast<int64_t>(instr - (code_addr + o_.code_adaptive));
      UserFrame uf;
      uf.kind = UserFrame::Kind::Python;
      uf.function = c.function;
      uf.file = c.file;
      uf.line = offset < (int64_t{1} << 30)
                    ? python_linetable::line_for_offset(c.linetable, c.first_line, offset)
                    : 0;
      frames.push_back(std::move(uf));
      frame = next;
    }
    (void)tstate_addr;
    return frames;
  }

 private:
  int pid_;
  const PyOffsets& o_;
  std::unordered_map<uint64_t, CodeInfo> codes_;
  CodeInfo failed_;
  std::unordered_map<uint64_t, std::string> type_names_;
};

std::string stack_error(const std::string& reason) { return "failed to read Python stack: " + reason; }

}  // namespace

std::string collect_python_stacks(ProcessInfo& p, int mem_pid, const std::string& proc_dir) {
  auto fail_all = [&](const std::string& reason) {
    for (auto& t : p.threads) {
      t.python_stack.clear();
      t.python_stack_error = stack_error(reason);
      t.holds_gil = false;
    }
    return reason;
  };
  auto loc = find_runtime(mem_pid, proc_dir);
  if (!loc) return fail_all(loc.error());
  auto offsets = offsets_for(loc->major, loc->minor);
  if (!offsets)
    return fail_all(
        fmt::format("CPython {}.{} ({}) is not supported (3.11 is)", loc->major, loc->minor, loc->binary));
  const PyOffsets& o = *offsets;
  Walker walker(mem_pid, o);

  auto runtime = walker.read(loc->runtime, o.runtime_gil_locked + 4, "_PyRuntime");
  if (!runtime) return fail_all(runtime.error());
  uint64_t gil_holder =
      load_u32(*runtime, o.runtime_gil_locked) ? load_u64(*runtime, o.runtime_gil_last_holder) : 0;

  std::unordered_map<int, ThreadInfo*> by_tid;
  for (auto& t : p.threads) by_tid[t.tid] = &t;

  uint64_t interp = load_u64(*runtime, o.runtime_interpreters_head);
  std::unordered_set<uint64_t> seen_interps, seen_threads;
  size_t threads = 0;
  std::string first_error;
  while (interp != 0 && seen_interps.size() < kMaxInterpreters) {
    if (!seen_interps.insert(interp).second) break;
    auto is = walker.read(interp, o.interp_threads_head + 8, "interpreter state");
    if (!is) {
      if (first_error.empty()) first_error = is.error();
      break;
    }
    uint64_t tstate = load_u64(*is, o.interp_threads_head);
    while (tstate != 0 && threads < kMaxThreads) {
      if (!seen_threads.insert(tstate).second) break;
      ++threads;
      auto ts = walker.read(tstate, o.tstate_read_size, "thread state");
      if (!ts) {
        if (first_error.empty()) first_error = ts.error();
        break;
      }
      int tid = static_cast<int>(load_u64(*ts, o.tstate_native_thread_id));
      auto it = by_tid.find(tid);
      if (it != by_tid.end()) {
        ThreadInfo& t = *it->second;
        t.holds_gil = gil_holder != 0 && gil_holder == tstate;
        // A running thread pushes and pops frames while we read: a walk that
        // ran into a freed frame is tried again on a fresh thread state.
        auto frames = walker.stack(tstate, *ts);
        for (int attempt = 1; attempt < kWalkAttempts && !frames; ++attempt) {
          auto again = walker.read(tstate, o.tstate_read_size, "thread state");
          if (again) frames = walker.stack(tstate, *again);
        }
        if (frames) {
          t.python_stack = std::move(*frames);
          t.python_stack_error.clear();
        } else {
          t.python_stack.clear();
          t.python_stack_error = stack_error(frames.error());
        }
      }
      tstate = load_u64(*ts, o.tstate_next);
    }
    interp = load_u64(*is, o.interp_next);
  }
  if (seen_interps.empty()) return fail_all("no interpreter (not initialized yet, or finalized)");
  return first_error;
}

}  // namespace hangtrace
