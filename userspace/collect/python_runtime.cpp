#include "python_runtime.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "elf_symbols.h"
#include "hangtrace/procfs.h"
#include "procmem.h"
#include "python_offsets.h"
#include "hangtrace/text.h"

namespace hangtrace::python {

namespace {

// ---- ELF: _PyRuntime and Py_Version ---------------------------------------

struct ElfInfo {
  bool ok = false;
  std::string error;
  uint64_t runtime = 0;          // st_value of _PyRuntime (unrelocated)
  uint64_t version = 0;          // st_value of Py_Version, 0 if absent (< 3.11)
  uint64_t section_runtime = 0;  // the .PyRuntime section (3.12+: _PyRuntime alone), 0 if none
  uint64_t section_asyncio = 0;  // the .AsyncioDebug section (3.14+: the _asyncio module's offsets)
  bool is_dyn = false;
  struct Load {
    uint64_t vaddr, offset, filesz;
  };
  std::vector<Load> loads;
};

ElfInfo read_elf(const std::string& path) {
  ElfInfo info;
  auto file = elf::ElfFile::open(path);
  if (!file) {
    info.error = file.error();
    return info;
  }
  info.is_dyn = file->is_shared_object();
  for (const elf::LoadSegment& l : file->load_segments()) info.loads.push_back({l.vaddr, l.offset, l.filesz});
  // CPython 3.12+ puts _PyRuntime in a section of its own so that tools
  // find it without symbols (a stripped or statically linked interpreter).
  info.section_runtime = file->section_address(".PyRuntime", SHT_PROGBITS);
  info.section_asyncio = file->section_address(".AsyncioDebug", SHT_PROGBITS);
  auto symbols = file->find_symbols(elf::Tables::Both, {"_PyRuntime", "Py_Version"},
                                    [](const elf::Symbol& sym) { return sym.value != 0; });
  if (auto it = symbols.find("_PyRuntime"); it != symbols.end()) info.runtime = it->second.value;
  if (auto it = symbols.find("Py_Version"); it != symbols.end()) info.version = it->second.value;
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
  std::string base = basename_of(path);
  size_t at = base.find("python");
  if (at == std::string::npos) return std::nullopt;
  int major = 0, minor = 0;
  if (std::sscanf(base.c_str() + at, "python%d.%d", &major, &minor) == 2) return std::make_pair(major, minor);
  return std::nullopt;
}

bool python_file(const std::string& path) {
  std::string base = basename_of(path);
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

// What to add to the file's addresses for where `lowest` (the file's
// lowest mapping) put them.
Result<uint64_t> load_bias(const ElfInfo& elf, const Mapping& lowest) {
  if (!elf.is_dyn) return uint64_t{0};
  for (const auto& l : elf.loads)
    if (lowest.offset >= (l.offset & ~uint64_t{4095}) && lowest.offset < l.offset + l.filesz) {
      // The address the mapping's first byte has in the file's own layout.
      uint64_t file_vaddr = l.vaddr - l.offset + lowest.offset;
      return lowest.start - file_vaddr;
    }
  return make_error(fmt::format("{}: no loadable segment at offset {:#x}", lowest.path, lowest.offset));
}

// The ELF of the file behind `m`, through the path or else what is mapped.
ElfInfo elf_of(const procfs::ProcFs& fs, int pid, const std::vector<Mapping>& maps, const Mapping& m,
               const Mapping** lowest_out) {
  const Mapping* lowest = &m;
  for (const auto& x : maps)
    if (x.path == m.path && x.offset < lowest->offset) lowest = &x;
  *lowest_out = lowest;
  ElfInfo elf = cached_elf(fs.root_path(pid, m.path), lowest->inode);
  if (!elf.ok) elf = cached_elf(fs.map_file_path(pid, lowest->start, lowest->end), lowest->inode);
  return elf;
}

}  // namespace

Result<uint64_t> find_asyncio_debug(const procfs::ProcFs& fs, int pid, const std::vector<Mapping>& maps) {
  std::set<std::string> seen;
  std::string last_error = "the _asyncio module is not loaded";
  for (const auto& m : maps) {
    if (m.path.empty() || m.path[0] != '/' || !seen.insert(m.path).second) continue;
    const std::string base = basename_of(m.path);
    if (base.rfind("_asyncio", 0) != 0 && !python_file(m.path)) continue;
    const Mapping* lowest = nullptr;
    ElfInfo elf = elf_of(fs, pid, maps, m, &lowest);
    if (!elf.ok || !elf.section_asyncio) continue;
    auto bias = load_bias(elf, *lowest);
    if (!bias) {
      last_error = bias.error();
      continue;
    }
    const uint64_t address = elf.section_asyncio + *bias;
    for (const auto& x : maps)
      if (address >= x.start && address < x.end) return address;
    last_error = fmt::format("the .AsyncioDebug section of {} is not mapped", m.path);
  }
  return make_error(last_error);
}

Result<RuntimeLocation> find_runtime(const procfs::ProcFs& fs, int pid, bool use_symbols,
                                     const std::vector<Mapping>* known_maps) {
  const int mem_pid = pid;
  Result<std::vector<Mapping>> read_maps = std::vector<Mapping>{};
  if (!known_maps) {
    read_maps = fs.maps(pid);
    if (!read_maps) return make_error(fmt::format("no memory maps: {}", read_maps.error()));
  }
  const std::vector<Mapping>* maps = known_maps ? known_maps : &*read_maps;
  // Candidate files, libpython first (a python linked against it has no
  // _PyRuntime of its own), each with its lowest mapping.
  std::vector<const Mapping*> candidates;
  std::set<std::string> seen;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& m : *maps) {
      if (m.path.empty() || m.path[0] != '/' || !python_file(m.path)) continue;
      std::string base = basename_of(m.path);
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
    std::string file = fs.root_path(pid, first->path);
    ElfInfo elf = cached_elf(file, lowest->inode);
    if (!elf.ok) {
      // The path may not resolve (another mount namespace, a deleted or
      // replaced file); map_files opens what is mapped.
      elf = cached_elf(fs.map_file_path(pid, lowest->start, lowest->end), lowest->inode);
    }
    if (!elf.ok) {
      last_error = elf.error;
      continue;
    }
    auto bias_or = load_bias(elf, *lowest);
    if (!bias_or) {
      last_error = bias_or.error();
      continue;
    }
    const uint64_t bias = *bias_or;
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
      if (auto listed = fs.tids(pid)) tids.insert(listed->begin(), listed->end());
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

}  // namespace hangtrace::python
