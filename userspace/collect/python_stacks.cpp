#include "python_stacks.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <mutex>
#include <optional>
#include <filesystem>
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

// How a version lays out its frames and encodes line numbers.
enum class FrameLayout {
  FrameObjects,       // 3.8-3.10: PyThreadState.frame -> PyFrameObject.f_back chain
  InterpreterFrames,  // 3.11+: _PyInterpreterFrame.previous chain
};
enum class LineTable { Lnotab, Linetable310, Locations };

// Where the fields the walk needs live, for one CPython minor version on
// x86_64 (LP64). For the fields only some versions have (the GIL ones, the
// thread ids, tstate_frame/tstate_cframe, frame_lasti, frame_is_entry) 0
// means "this version has no such field"; the others are used as they are,
// 0 included.
struct PyOffsets {
  int major = 3, minor = 0;
  FrameLayout layout = FrameLayout::InterpreterFrames;
  LineTable line_table = LineTable::Locations;
  int lasti_unit = 1;  // bytes per f_lasti step (FrameObjects): 1 before 3.10, 2 in 3.10
  // _PyRuntime
  uint64_t runtime_interpreters_head = 0;
  uint64_t runtime_gil_last_holder = 0;  // _PyRuntime.ceval.gil.last_holder (< 3.12)
  uint64_t runtime_gil_locked = 0;       // _PyRuntime.ceval.gil.locked (< 3.12)
  // PyInterpreterState
  uint64_t interp_next = 0;
  uint64_t interp_threads_head = 0;
  uint64_t interp_gil = 0;  // 3.12+: interp->ceval.gil, a struct _gil_runtime_state*
  // struct _gil_runtime_state, for interp_gil
  uint64_t gil_last_holder = 0;
  uint64_t gil_locked = 0;
  // PyThreadState
  uint64_t tstate_next = 0;
  uint64_t tstate_native_thread_id = 0;  // 3.11+
  uint64_t tstate_thread_id = 0;         // pthread_t, for versions without native_thread_id
  uint64_t tstate_frame = 0;             // 3.8-3.10 frame, 3.13+ current_frame
  uint64_t tstate_cframe = 0;            // 3.11/3.12: tstate->cframe
  uint64_t cframe_current_frame = 0;     // _PyCFrame.current_frame
  uint64_t tstate_read_size = 0;
  // PyFrameObject (3.8-3.10) or _PyInterpreterFrame (3.11+)
  uint64_t frame_code = 0;        // f_code; 3.13+ f_executable
  uint64_t frame_previous = 0;    // previous; f_back for frame objects
  uint64_t frame_prev_instr = 0;  // 3.11/3.12 prev_instr, 3.13+ instr_ptr
  uint64_t frame_lasti = 0;       // frame objects: f_lasti (int)
  uint64_t frame_is_entry = 0;    // 3.11: is_entry
  uint64_t frame_owner = 0;
  int owner_cstack = -1;  // FRAME_OWNED_BY_CSTACK (3.12+), -1 when none
  uint64_t frame_read_size = 0;
  // PyCodeObject
  uint64_t code_filename = 0;
  uint64_t code_name = 0;  // co_qualname from 3.11, co_name before
  uint64_t code_firstlineno = 0;
  uint64_t code_linetable = 0;  // co_lnotab in 3.8/3.9
  uint64_t code_adaptive = 0;   // co_code_adaptive: the instructions, inline (3.11+)
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

// CPython 3.8-3.10, measured with gdb on pyenv's 3.8.18, 3.9.18 and 3.10.13
// (libpython with DWARF): `ptype /o struct _ts`, `ptype /o struct _frame`,
// `p &((PyCodeObject*)0)->co_name`, `p &((struct pyruntimestate*)0)->ceval.gil`.
// These have no native_thread_id: the Linux TID comes from the pthread_t in
// thread_id (see pthread_tids).
PyOffsets offsets_frame_objects(int minor) {
  PyOffsets o;
  o.minor = minor;
  o.layout = FrameLayout::FrameObjects;
  o.line_table = minor == 10 ? LineTable::Linetable310 : LineTable::Lnotab;
  o.lasti_unit = minor == 10 ? 2 : 1;
  o.runtime_interpreters_head = 32;
  // 3.9 moved the pending calls from _PyRuntime.ceval into the interpreter,
  // so the GIL sits earlier.
  o.runtime_gil_last_holder = minor == 8 ? 0x488 : 0x168;
  o.runtime_gil_locked = minor == 8 ? 0x490 : 0x170;
  o.interp_next = 0;
  o.interp_threads_head = 8;  // tstate_head
  o.tstate_next = 8;
  o.tstate_frame = 24;
  o.tstate_thread_id = 176;
  o.tstate_read_size = 184;
  o.frame_previous = 24;  // f_back
  o.frame_code = 32;
  o.frame_lasti = minor == 10 ? 96 : 104;
  o.frame_read_size = o.frame_lasti + 4;
  o.code_firstlineno = 40;
  o.code_filename = 104;
  o.code_name = 112;
  o.code_linetable = 120;  // co_lnotab (3.8/3.9), co_linetable (3.10)
  o.code_read_size = 128;
  // PyASCIIObject still has wstr, PyCompactUnicodeObject utf8 + wstr_length.
  o.unicode_ascii_data = 48;
  o.unicode_compact_data = 72;
  return o;
}

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
  o.frame_is_entry = 68;
  o.frame_owner = 69;
  o.owner_cstack = -1;  // 3.11 has no shim frames (is_entry marks C entry)
  o.frame_read_size = 72;
  o.code_filename = 112;
  o.code_name = 128;  // co_qualname
  o.code_firstlineno = 72;
  o.code_linetable = 136;
  o.code_adaptive = 184;
  o.code_read_size = 144;
  return o;
}

// CPython 3.12, measured with gdb on pyenv's 3.12.1: `ptype /o struct
// _PyInterpreterFrame`, `p &((struct _is*)0)->ceval.gil`, `ptype /o struct
// _gil_runtime_state`, `p (int)FRAME_OWNED_BY_CSTACK`.
PyOffsets offsets_312() {
  PyOffsets o;
  o.minor = 12;
  o.runtime_interpreters_head = 40;
  o.interp_next = 0;
  o.interp_threads_head = 72;
  // Each interpreter may have its own GIL from 3.12 on; ceval.gil points at
  // the one it uses (its own _gil or the main interpreter's).
  o.interp_gil = 384;
  o.gil_last_holder = 8;
  o.gil_locked = 16;
  o.tstate_next = 8;
  o.tstate_native_thread_id = 144;
  o.tstate_cframe = 56;
  o.cframe_current_frame = 0;
  o.tstate_read_size = 152;
  o.frame_code = 0;
  o.frame_previous = 8;
  o.frame_prev_instr = 56;
  o.frame_owner = 70;
  o.owner_cstack = 3;
  o.frame_read_size = 72;
  o.code_firstlineno = 68;
  o.code_filename = 112;
  o.code_name = 128;  // co_qualname
  o.code_linetable = 136;
  o.code_adaptive = 192;
  o.code_read_size = 144;
  // 3.12 dropped wstr: the ascii data follows a 40-byte header.
  o.unicode_ascii_data = 40;
  o.unicode_compact_data = 56;
  return o;
}

std::optional<PyOffsets> offsets_for(int major, int minor) {
  if (major != 3) return std::nullopt;
  if (minor >= 8 && minor <= 10) return offsets_frame_objects(minor);
  if (minor == 11) return offsets_311();
  if (minor == 12) return offsets_312();
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
  uint64_t runtime = 0;          // st_value of _PyRuntime (unrelocated)
  uint64_t version = 0;          // st_value of Py_Version, 0 if absent (< 3.11)
  uint64_t section_runtime = 0;  // the .PyRuntime section (3.12+: _PyRuntime alone), 0 if none
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
  size_t shstrndx = 0;
  bool have_names = elf_getshdrstrndx(elf, &shstrndx) == 0;
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn)) != nullptr) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    // CPython 3.12+ puts _PyRuntime in a section of its own so that tools
    // find it without symbols (a stripped or statically linked interpreter).
    if (have_names && !info.section_runtime && sh.sh_type == SHT_PROGBITS) {
      const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
      if (name && std::strcmp(name, ".PyRuntime") == 0) info.section_runtime = sh.sh_addr;
    }
    if (info.runtime && info.version) continue;
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
  // Without the symbol or the section, find_runtime scans the module's data.
  info.ok = !info.loads.empty();
  if (!info.ok) info.error = fmt::format("no loadable segments in {}", path);
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

// Without symbols: _PyRuntime is in the module's writable data (.data, or
// the .bss mapped anonymously right after it). 3.13+ starts it with the
// _Py_DebugOffsets cookie "xdebugpy"; before, a candidate must hold an
// interpreter list whose first interpreter's first thread state points back
// at that interpreter (PyThreadState.interp, at 16 in 3.8-3.12). Bounded:
// 16 MiB of data read, 20000 candidate pointers followed.
Result<uint64_t> scan_for_runtime(int mem_pid, const std::vector<Mapping>& maps, const std::string& path,
                                  int major, int minor, const std::set<int>& tids) {
  std::vector<std::pair<uint64_t, uint64_t>> regions;
  for (size_t i = 0; i < maps.size(); ++i) {
    const Mapping& m = maps[i];
    if (m.path != path || m.perms.size() < 2 || m.perms[0] != 'r' || m.perms[1] != 'w') continue;
    regions.emplace_back(m.start, m.end);
    if (i + 1 < maps.size() && maps[i + 1].path.empty() && maps[i + 1].start == m.end)
      regions.emplace_back(maps[i + 1].start, maps[i + 1].end);
  }
  if (regions.empty()) return make_error(fmt::format("no writable data of {} to scan", path));
  std::optional<PyOffsets> o = offsets_for(major, minor);
  bool cookie = major == 3 && minor >= 13;
  if (!o && !cookie)
    return make_error(fmt::format("CPython {}.{} has no known layout to scan for", major, minor));
  constexpr uint64_t kMaxScanBytes = 16 << 20;
  constexpr int kMaxFollowed = 20000;
  uint64_t scanned = 0;
  int followed = 0;
  for (const auto& [start, end] : regions) {
    uint64_t size = std::min(end - start, kMaxScanBytes - scanned);
    if (size < 16) break;
    scanned += size;
    auto data = read_process_memory(mem_pid, start, size);
    if (!data) continue;
    const std::vector<uint8_t>& b = *data;
    for (uint64_t off = 0; off + 16 <= b.size(); off += 8) {
      if (cookie) {
        if (std::memcmp(b.data() + off, "xdebugpy", 8) == 0) return start + off;
        continue;
      }
      if (off + o->runtime_interpreters_head + 8 > b.size()) break;
      uint64_t interp = load_u64(b, off + o->runtime_interpreters_head);
      if (!plausible_pointer(interp) || interp == start + off) continue;
      if (++followed > kMaxFollowed) return make_error("no _PyRuntime found within the scan's bounds");
      auto threads = read_process_memory(mem_pid, interp + o->interp_threads_head, 8);
      if (!threads) continue;
      uint64_t tstate = load_u64(*threads, 0);
      if (!plausible_pointer(tstate)) continue;
      auto back = read_process_memory(mem_pid, tstate + 16, 8);
      if (!back || load_u64(*back, 0) != interp) continue;
      // Any word holding the interpreter's address passes so far (and 3.11+
      // embed the interpreter and its first thread state in _PyRuntime,
      // full of such words): interpreters.main follows interpreters.head
      // and is the same interpreter in a process with one, and from 3.11 the
      // thread state names a thread of this process.
      if (off + o->runtime_interpreters_head + 16 > b.size() ||
          load_u64(b, off + o->runtime_interpreters_head + 8) != interp)
        continue;
      if (o->tstate_native_thread_id) {
        auto tid = read_process_memory(mem_pid, tstate + o->tstate_native_thread_id, 8);
        if (!tid || !tids.count(static_cast<int>(load_u64(*tid, 0)))) continue;
      }
      return start + off;
    }
  }
  return make_error(fmt::format("no _PyRuntime found in the data of {}", path));
}

Result<RuntimeLocation> find_runtime(int mem_pid, const std::string& proc_dir, bool use_symbols) {
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
    loc.binary = first->path;
    if (use_symbols && elf.version) {
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
    if (use_symbols && elf.runtime) {
      loc.runtime = elf.runtime + bias;
    } else if (elf.section_runtime) {  // section headers survive `strip`
      loc.runtime = elf.section_runtime + bias;
    } else {
      std::set<int> tids;
      std::error_code ec;
      for (const auto& t : std::filesystem::directory_iterator(proc_dir + "/task", ec))
        tids.insert(std::atoi(t.path().filename().c_str()));
      auto found = scan_for_runtime(mem_pid, *maps, first->path, loc.major, loc.minor, tids);
      if (!found) {
        last_error = fmt::format("no _PyRuntime symbol in {}, and {}", first->path, found.error());
        continue;
      }
      loc.runtime = *found;
    }
    bool mapped = false;
    for (const auto& m : *maps) mapped = mapped || (loc.runtime >= m.start && loc.runtime < m.end);
    if (!mapped) {
      last_error = fmt::format("_PyRuntime of {} at {:#x} is not mapped", first->path, loc.runtime);
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
        if (auto data = read_process_memory(pid_, table + o_.bytes_data, size))
          info.linetable = std::move(*data);
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
  int pid_;
  const PyOffsets& o_;
  std::unordered_map<uint64_t, CodeInfo> codes_;
  CodeInfo failed_;
  std::unordered_map<uint64_t, std::string> type_names_;
};

std::string stack_error(const std::string& reason) { return "failed to read Python stack: " + reason; }

// ---- 3.13+: _Py_DebugOffsets --------------------------------------------------

// The head of _PyRuntime from 3.13 on: the offsets out-of-process tools need,
// written by the interpreter itself. This is the 3.13 layout (gdb: `ptype /o
// struct _Py_DebugOffsets` on 3.13.0); later versions insert fields, so the
// table is used only when its `version` says 3.13.
struct DebugOffsets313 {
  char cookie[8];
  uint64_t version;
  uint64_t free_threaded;
  struct {
    uint64_t size, finalizing, interpreters_head;
  } runtime_state;
  struct {
    uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins, ceval_gil,
        gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked, gil_runtime_state_holder;
  } interpreter_state;
  struct {
    uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
  } thread_state;
  struct {
    uint64_t size, previous, executable, instr_ptr, localsplus, owner;
  } interpreter_frame;
  struct {
    uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames,
        localspluskinds, co_code_adaptive;
  } code_object;
  struct {
    uint64_t size, ob_type;
  } pyobject;
  struct {
    uint64_t size, tp_name, tp_repr, tp_flags;
  } type_object;
  uint64_t tuple_list_dict_float_long[14];
  struct {
    uint64_t size, ob_size, ob_sval;
  } bytes_object;
  struct {
    uint64_t size, state, length, asciiobject_size;
  } unicode_object;
  struct {
    uint64_t size, collecting;
  } gc;
};
static_assert(sizeof(DebugOffsets313) == 584);

// FRAME_OWNED_BY_CSTACK is not in the debug offsets; 3.13.0 (gdb: `p
// (int)FRAME_OWNED_BY_CSTACK`) has the 3.12 value.
constexpr int kOwnedByCstack313 = 3;

Result<PyOffsets> offsets_from_debug(int pid, uint64_t runtime, int major, int minor) {
  auto bytes = read_process_memory(pid, runtime, sizeof(DebugOffsets313));
  if (!bytes) return make_error("cannot read _Py_DebugOffsets at the start of _PyRuntime");
  DebugOffsets313 d;
  std::memcpy(&d, bytes->data(), sizeof d);
  if (std::memcmp(d.cookie, "xdebugpy", 8) != 0)
    return make_error("_PyRuntime does not start with _Py_DebugOffsets");
  int dmajor = static_cast<int>((d.version >> 24) & 0xff),
      dminor = static_cast<int>((d.version >> 16) & 0xff);
  if (dmajor != major || dminor != minor)
    return make_error(
        fmt::format("_Py_DebugOffsets says {}.{}, the binary {}.{}", dmajor, dminor, major, minor));
  if (dmajor != 3 || dminor != 13)
    return make_error(
        fmt::format("the _Py_DebugOffsets layout of CPython {}.{} is not known (3.13's is)", dmajor, dminor));
  // A field outside its struct means the layout is not the one assumed.
  auto within = [](uint64_t size, std::initializer_list<uint64_t> fields) {
    if (size == 0 || size > (1 << 20)) return false;
    for (uint64_t f : fields)
      if (f + 8 > size) return false;
    return true;
  };
  const auto& is = d.interpreter_state;
  const auto& ts = d.thread_state;
  const auto& fr = d.interpreter_frame;
  const auto& co = d.code_object;
  const auto& un = d.unicode_object;
  if (!within(d.runtime_state.size, {d.runtime_state.interpreters_head}) ||
      !within(is.size, {is.next, is.threads_head}) ||
      !within(ts.size, {ts.next, ts.current_frame, ts.native_thread_id}) ||
      !within(fr.size, {fr.previous, fr.executable, fr.instr_ptr}) || fr.owner >= fr.size ||
      !within(co.size, {co.filename, co.qualname, co.linetable, co.co_code_adaptive}) ||
      co.firstlineno + 4 > co.size || !within(d.pyobject.size, {d.pyobject.ob_type}) ||
      !within(d.type_object.size, {d.type_object.tp_name}) ||
      !within(d.bytes_object.size, {d.bytes_object.ob_size}) ||
      d.bytes_object.ob_sval > d.bytes_object.size || !within(un.size, {un.length}) ||
      un.state + 4 > un.size || un.asciiobject_size > un.size)
    return make_error("_Py_DebugOffsets is inconsistent");
  PyOffsets o;
  o.major = major;
  o.minor = minor;
  o.runtime_interpreters_head = d.runtime_state.interpreters_head;
  o.interp_next = is.next;
  o.interp_threads_head = is.threads_head;
  // The GIL a thread waits on is the one interp->ceval.gil points at; the
  // table gives the fields of the interpreter's own _gil, whose distances from
  // _gil are the fields' offsets in any struct _gil_runtime_state. Free-threaded
  // builds may run without a GIL: no holder then.
  if (!d.free_threaded && is.ceval_gil && is.gil_runtime_state &&
      is.gil_runtime_state_holder > is.gil_runtime_state &&
      is.gil_runtime_state_locked > is.gil_runtime_state &&
      is.gil_runtime_state_holder - is.gil_runtime_state < 4096 &&
      is.gil_runtime_state_locked - is.gil_runtime_state < 4096 && is.ceval_gil + 8 <= is.size) {
    o.interp_gil = is.ceval_gil;
    o.gil_last_holder = is.gil_runtime_state_holder - is.gil_runtime_state;
    o.gil_locked = is.gil_runtime_state_locked - is.gil_runtime_state;
  }
  o.tstate_next = ts.next;
  o.tstate_native_thread_id = ts.native_thread_id;
  o.tstate_frame = ts.current_frame;
  o.tstate_read_size = std::max({ts.next, ts.current_frame, ts.native_thread_id}) + 8;
  o.frame_code = fr.executable;
  o.frame_previous = fr.previous;
  o.frame_prev_instr = fr.instr_ptr;  // the current instruction, not the previous one
  o.frame_owner = fr.owner;
  o.owner_cstack = kOwnedByCstack313;
  o.frame_read_size = std::max({fr.previous + 8, fr.executable + 8, fr.instr_ptr + 8, fr.owner + 1});
  o.code_filename = co.filename;
  o.code_name = co.qualname;
  o.code_linetable = co.linetable;
  o.code_firstlineno = co.firstlineno;
  o.code_adaptive = co.co_code_adaptive;
  o.code_read_size = std::max({co.filename, co.qualname, co.linetable, co.firstlineno}) + 8;
  o.object_type = d.pyobject.ob_type;
  o.type_name = d.type_object.tp_name;
  o.unicode_length = un.length;
  o.unicode_state = un.state;
  o.unicode_ascii_data = un.asciiobject_size;
  // PyCompactUnicodeObject adds utf8_length and utf8 to the ASCII header.
  o.unicode_compact_data = un.asciiobject_size + 16;
  o.bytes_size = d.bytes_object.ob_size;
  o.bytes_data = d.bytes_object.ob_sval;
  return o;
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

std::vector<int> pthread_tids(int pid, const std::vector<uint64_t>& pthreads,
                              const std::unordered_set<int>& tids) {
  std::vector<int> out(pthreads.size(), 0);
  std::vector<std::vector<uint8_t>> structs;
  for (uint64_t p : pthreads)
    structs.push_back(plausible_pointer(p) ? read_process_memory_prefix(pid, p, kPthreadScanBytes)
                                           : std::vector<uint8_t>{});
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

}  // namespace

std::string collect_python_stacks(ProcessInfo& p, int mem_pid, const std::string& proc_dir,
                                  bool use_symbols) {
  auto fail_all = [&](const std::string& reason) {
    for (auto& t : p.threads) {
      t.python_stack.clear();
      t.python_stack_error = stack_error(reason);
      t.holds_gil = false;
    }
    return reason;
  };
  auto loc = find_runtime(mem_pid, proc_dir, use_symbols);
  if (!loc) return fail_all(loc.error());
  std::optional<PyOffsets> offsets = offsets_for(loc->major, loc->minor);
  if (!offsets && loc->major == 3 && loc->minor >= 13) {
    auto debug = offsets_from_debug(mem_pid, loc->runtime, loc->major, loc->minor);
    if (!debug)
      return fail_all(fmt::format("CPython {}.{} ({}) is not supported: {}", loc->major, loc->minor,
                                  loc->binary, debug.error()));
    offsets = std::move(*debug);
  }
  if (!offsets)
    return fail_all(fmt::format("CPython {}.{} ({}) is not supported (3.8 to 3.13 are)", loc->major,
                                loc->minor, loc->binary));
  const PyOffsets& o = *offsets;
  Walker walker(mem_pid, o);

  uint64_t runtime_size = std::max(o.runtime_interpreters_head + 8, o.runtime_gil_locked + 4);
  auto runtime = walker.read(loc->runtime, runtime_size, "_PyRuntime");
  if (!runtime) return fail_all(runtime.error());
  // Thread states holding a GIL (one per GIL: 3.12+ interpreters may each
  // have their own). `locked` is -1 before the GIL exists.
  std::unordered_set<uint64_t> gil_holders;
  if (o.runtime_gil_locked && static_cast<int32_t>(load_u32(*runtime, o.runtime_gil_locked)) == 1)
    gil_holders.insert(load_u64(*runtime, o.runtime_gil_last_holder));

  std::unordered_map<int, ThreadInfo*> by_tid;
  std::unordered_set<int> tids;
  for (auto& t : p.threads) {
    by_tid[t.tid] = &t;
    tids.insert(t.tid);
  }

  struct TState {
    uint64_t addr;
    std::vector<uint8_t> bytes;
  };
  std::vector<TState> tstates;
  uint64_t interp = load_u64(*runtime, o.runtime_interpreters_head);
  uint64_t interp_size = std::max({o.interp_next, o.interp_threads_head, o.interp_gil}) + 8;
  std::unordered_set<uint64_t> seen_interps, seen_threads;
  std::string first_error;
  while (interp != 0 && seen_interps.size() < kMaxInterpreters) {
    if (!seen_interps.insert(interp).second) break;
    auto is = walker.read(interp, interp_size, "interpreter state");
    if (!is) {
      if (first_error.empty()) first_error = is.error();
      break;
    }
    if (o.interp_gil) {
      uint64_t gil = load_u64(*is, o.interp_gil);
      if (auto g = walker.read(gil, std::max(o.gil_last_holder + 8, o.gil_locked + 4), "GIL")) {
        if (static_cast<int32_t>(load_u32(*g, o.gil_locked)) == 1)
          gil_holders.insert(load_u64(*g, o.gil_last_holder));
      }
    }
    uint64_t tstate = load_u64(*is, o.interp_threads_head);
    while (tstate != 0 && tstates.size() < kMaxThreads) {
      if (!seen_threads.insert(tstate).second) break;
      auto ts = walker.read(tstate, o.tstate_read_size, "thread state");
      if (!ts) {
        if (first_error.empty()) first_error = ts.error();
        break;
      }
      uint64_t next = load_u64(*ts, o.tstate_next);
      tstates.push_back({tstate, std::move(*ts)});
      tstate = next;
    }
    interp = load_u64(*is, o.interp_next);
  }
  if (seen_interps.empty()) return fail_all("no interpreter (not initialized yet, or finalized)");
  gil_holders.erase(0);

  std::vector<int> tstate_tids;
  if (o.tstate_native_thread_id) {
    for (const auto& ts : tstates)
      tstate_tids.push_back(static_cast<int>(load_u64(ts.bytes, o.tstate_native_thread_id)));
  } else {
    std::vector<uint64_t> pthreads;
    for (const auto& ts : tstates) pthreads.push_back(load_u64(ts.bytes, o.tstate_thread_id));
    tstate_tids = pthread_tids(mem_pid, pthreads, tids);
  }

  for (size_t i = 0; i < tstates.size(); ++i) {
    auto it = by_tid.find(tstate_tids[i]);
    if (tstate_tids[i] == 0 || it == by_tid.end()) continue;
    ThreadInfo& t = *it->second;
    t.holds_gil = gil_holders.count(tstates[i].addr) > 0;
    // A running thread pushes and pops frames while we read: a walk that
    // ran into a freed frame is tried again on a fresh thread state.
    auto frames = walker.stack(tstates[i].bytes);
    for (int attempt = 1; attempt < kWalkAttempts && !frames; ++attempt) {
      auto again = walker.read(tstates[i].addr, o.tstate_read_size, "thread state");
      if (again) frames = walker.stack(*again);
    }
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

}  // namespace hangtrace
