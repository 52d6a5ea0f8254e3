#include "native_stacks.h"

#include <elf.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <libelf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hangtrace/procfs.h"
#include "hangtrace/result.h"
#include "native_symbols.h"

namespace hangtrace {

namespace {

constexpr size_t kMaxFrames = 128;
// Most of a blocked thread's CFI-driven reads land within a few KiB of sp:
// one process_vm_readv up front instead of one syscall per word.
constexpr size_t kStackCopyBytes = 32 * 1024;
constexpr size_t kPage = 4096;
// Dwfls kept alive across processes and captures; each pins its modules'
// CFI and symbol tables (tens of MB for a PyTorch process).
constexpr size_t kMaxSessions = 8;

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The process whose files and memory libdw callbacks without an argument
// (find_elf) must use; set around every libdw call under the cache mutex.
thread_local pid_t t_current_pid = 0;

// Opens the module through the target's own root so processes in another
// mount namespace (containers) get their files, not ours with the same path.
int find_elf(Dwfl_Module* mod, void** userdata, const char* module_name, Dwarf_Addr base, char** file_name,
             Elf** elfp) {
  if (module_name && module_name[0] == '/' && t_current_pid > 0) {
    int err = 0;
    auto opened = procfs::ProcFs().open_in_root(t_current_pid, module_name, &err);
    // Something there that is no regular file (a FIFO put where the library
    // was): not opened again by path below, where it would block.
    if (!opened && err == EINVAL) return -1;
    if (opened) {
      const int fd = *opened;
      // Mapped whole, then the fd closed: cached Dwfls would otherwise hold
      // one fd per module for as long as hangtrace runs.
      Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
      // FDREAD reads in whatever mmap did not cover, then marks the fd done.
      if (elf && elf_kind(elf) == ELF_K_ELF && elf_cntl(elf, ELF_C_FDREAD) == 0) {
        close(fd);
        *elfp = elf;
        *file_name = strdup(module_name);
        return -1;
      }
      if (elf) elf_end(elf);
      *file_name = strdup(module_name);
      return fd;
    }
  }
  // Deleted files and the vDSO: read from the process itself.
  return dwfl_linux_proc_find_elf(mod, userdata, module_name, base, file_name, elfp);
}

// No separate debug files for the cached Dwfls: libdwfl keeps such a file's
// fd open for the Dwfl's lifetime, and unwinding needs only .eh_frame. Their
// symbols still count (SymbolIndex::add_debug_file); and nothing here may
// reach debuginfod over the network while a job hangs.
int find_debuginfo(Dwfl_Module*, void**, const char*, Dwarf_Addr, const char*, const char*, GElf_Word,
                   char**) {
  return -1;
}

const Dwfl_Callbacks kDwflCallbacks = {
    .find_elf = find_elf,
    .find_debuginfo = find_debuginfo,
    .section_address = nullptr,
    .debuginfo_path = nullptr,
};

// What the thread callbacks see: the thread being unwound right now. A Dwfl
// is attached once but serves many processes (same mappings), so the pid for
// memory reads is mutable too.
struct UnwindState {
  pid_t pid = 0;
  pid_t tid = 0;
  uint16_t machine = 0;
  uint16_t nregs = 0;
  const uint64_t* regs = nullptr;
  uint64_t copy_base = 0;
  size_t copy_len = 0;
  std::vector<uint8_t> copy = std::vector<uint8_t>(kStackCopyBytes);
  uint64_t remote_reads = 0;
};

bool read_remote(pid_t pid, uint64_t addr, void* out, size_t len) {
  iovec local{out, len};
  iovec remote{reinterpret_cast<void*>(addr), len};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(len);
}

// Page-sized remote pieces: a read that runs off the end of the stack
// mapping then still returns the pages before it.
size_t copy_stack(pid_t pid, uint64_t sp, std::vector<uint8_t>& buf) {
  iovec local{buf.data(), buf.size()};
  std::vector<iovec> remote;
  uint64_t addr = sp;
  uint64_t end = sp + buf.size();
  while (addr < end) {
    uint64_t next = std::min(end, (addr / kPage + 1) * kPage);
    remote.push_back({reinterpret_cast<void*>(addr), static_cast<size_t>(next - addr)});
    addr = next;
  }
  ssize_t n = process_vm_readv(pid, &local, 1, remote.data(), remote.size(), 0);
  return n > 0 ? static_cast<size_t>(n) : 0;
}

pid_t cb_next_thread(Dwfl*, void*, void**) { return 0; }

bool cb_get_thread(Dwfl*, pid_t tid, void* dwfl_arg, void** thread_argp) {
  auto* st = static_cast<UnwindState*>(dwfl_arg);
  if (tid != st->tid) return false;
  *thread_argp = st;
  return true;
}

bool cb_memory_read(Dwfl*, Dwarf_Addr addr, Dwarf_Word* result, void* dwfl_arg) {
  auto* st = static_cast<UnwindState*>(dwfl_arg);
  if (addr >= st->copy_base && addr - st->copy_base + sizeof(Dwarf_Word) <= st->copy_len) {
    std::memcpy(result, st->copy.data() + (addr - st->copy_base), sizeof(Dwarf_Word));
    return true;
  }
  ++st->remote_reads;
  return read_remote(st->pid, addr, result, sizeof(Dwarf_Word));
}

bool cb_set_initial_registers(Dwfl_Thread* thread, void* thread_arg) {
  auto* st = static_cast<UnwindState*>(thread_arg);
  const Dwarf_Word* regs = reinterpret_cast<const Dwarf_Word*>(st->regs);
  if (st->machine == EM_AARCH64) {
    // libdw's aarch64 numbering has no pc register: it is set on its own.
    if (!dwfl_thread_state_registers(thread, 0, 32, regs)) return false;
    dwfl_thread_state_register_pc(thread, regs[32]);
    return true;
  }
  if (!dwfl_thread_state_registers(thread, 0, st->nregs, regs)) return false;
  dwfl_thread_state_register_pc(thread, regs[16]);
  return true;
}

const Dwfl_Thread_Callbacks kThreadCallbacks = {
    .next_thread = cb_next_thread,
    .get_thread = cb_get_thread,
    .memory_read = cb_memory_read,
    .set_initial_registers = cb_set_initial_registers,
    .detach = nullptr,
    .thread_detach = nullptr,
};

std::string dwfl_error() {
  const char* msg = dwfl_errmsg(-1);
  return msg ? msg : "unknown libdw error";
}

int sp_regno(uint16_t machine) { return machine == EM_AARCH64 ? 31 : 7; }

// The executable file mappings (and the vDSO) of a process: two processes
// with the same ones run the same code at the same addresses, so one Dwfl
// (modules, CFI, symbol tables) serves both. Data mappings (/dev/shm
// segments, datasets) differ between DataLoader workers and are left out.
std::optional<std::string> code_signature(int pid, const std::vector<Mapping>* known_maps,
                                          std::string& error) {
  Result<std::vector<Mapping>> read_maps = std::vector<Mapping>{};
  if (!known_maps) {
    read_maps = procfs::ProcFs().maps(pid);
    if (!read_maps) {
      error = read_maps.error();
      return std::nullopt;
    }
  }
  std::string sig;
  for (const Mapping& m : known_maps ? *known_maps : *read_maps) {
    if (!procfs::is_executable(m) || m.path.empty() || (m.path[0] != '/' && m.path != "[vdso]")) continue;
    sig += fmt::format("{:x}-{:x} {} {:x} {:x}:{:x} {} {}\n", m.start, m.end, m.perms, m.offset, m.dev_major,
                       m.dev_minor, m.inode, m.path);
  }
  if (sig.empty()) {
    error = fmt::format("failed to read {}/maps: no executable mappings", procfs::ProcFs().pid_path(pid));
    return std::nullopt;
  }
  return sig;
}

struct ModuleMeta {
  std::string path;
  std::string build_id;  // hex
  Dwarf_Addr bias = 0;   // load bias: pc - bias is the ELF virtual address
};

struct Session {
  Dwfl* dwfl = nullptr;
  UnwindState state;
  uint64_t last_used = 0;
  std::unordered_map<Dwfl_Module*, ModuleMeta> modules;
  ~Session() {
    if (dwfl) dwfl_end(dwfl);
  }
};

struct RawFrame {
  Dwarf_Addr pc = 0;
  bool activation = false;
};

struct WalkState {
  std::vector<RawFrame> frames;
  int sp_reg = 7;
  Dwarf_Word last_sp = 0;
  bool have_last_sp = false;
};

int cb_frame(Dwfl_Frame* frame, void* arg) {
  auto* w = static_cast<WalkState*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(frame, &pc, &activation) || pc == 0) return DWARF_CB_ABORT;
  Dwarf_Word sp = 0;
  bool have_sp = dwfl_frame_reg(frame, static_cast<unsigned>(w->sp_reg), &sp) == 0;
  // The same pc at the same sp is a frame unwound into itself: a loop, not
  // recursion (which moves sp).
  if (!w->frames.empty() && w->frames.back().pc == pc && have_sp && w->have_last_sp && sp == w->last_sp)
    return DWARF_CB_ABORT;
  w->frames.push_back({pc, activation});
  w->last_sp = sp;
  w->have_last_sp = have_sp;
  return w->frames.size() >= kMaxFrames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

}  // namespace

struct NativeStackCache::Impl {
  mutable std::mutex mu;
  std::unordered_map<std::string, std::unique_ptr<Session>> sessions;  // by code_signature
  NativeSymbolizer symbolizer;
  uint64_t clock = 0;
  NativeStackStats stats;

  Result<Session*> session_for(int mem_pid, const std::vector<Mapping>* maps);
  const ModuleMeta& module_meta(Session& s, Dwfl_Module* mod);
  void unwind_thread(Session& s, ThreadInfo& t);
};

Result<Session*> NativeStackCache::Impl::session_for(int mem_pid, const std::vector<Mapping>* maps) {
  std::string error;
  auto sig = code_signature(mem_pid, maps, error);
  if (!sig) return make_error(error);
  if (auto it = sessions.find(*sig); it != sessions.end()) {
    ++stats.dwfl_reused;
    it->second->last_used = ++clock;
    return it->second.get();
  }
  auto s = std::make_unique<Session>();
  s->dwfl = dwfl_begin(&kDwflCallbacks);
  if (!s->dwfl) return make_error("failed to start libdw: " + dwfl_error());
  dwfl_report_begin(s->dwfl);
  int r = dwfl_linux_proc_report(s->dwfl, mem_pid);
  if (dwfl_report_end(s->dwfl, nullptr, nullptr) != 0 || r != 0) {
    std::string why = r > 0 ? std::strerror(r) : dwfl_error();
    return make_error(fmt::format("failed to report the modules of {}: {}", mem_pid, why));
  }
  s->state.pid = mem_pid;
  if (!dwfl_attach_state(s->dwfl, nullptr, mem_pid, &kThreadCallbacks, &s->state))
    return make_error(fmt::format("failed to set up unwinding of {}: {}", mem_pid, dwfl_error()));
  ++stats.dwfl_created;
  s->last_used = ++clock;
  if (sessions.size() >= kMaxSessions) {
    auto oldest = std::min_element(sessions.begin(), sessions.end(), [](const auto& a, const auto& b) {
      return a.second->last_used < b.second->last_used;
    });
    sessions.erase(oldest);
  }
  Session* raw = s.get();
  sessions.emplace(std::move(*sig), std::move(s));
  return raw;
}

const ModuleMeta& NativeStackCache::Impl::module_meta(Session& s, Dwfl_Module* mod) {
  auto it = s.modules.find(mod);
  if (it != s.modules.end()) return it->second;
  ModuleMeta m;
  Dwarf_Addr start = 0;
  const char* name = dwfl_module_info(mod, nullptr, &start, nullptr, nullptr, nullptr, nullptr, nullptr);
  if (name) m.path = name;
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  int len = dwfl_module_build_id(mod, &bits, &vaddr);
  if (len > 0 && bits) m.build_id = elf::hex(bits, static_cast<size_t>(len));
  Dwarf_Addr bias = 0;
  m.bias = dwfl_module_getelf(mod, &bias) ? bias : start;
  return s.modules.emplace(mod, std::move(m)).first->second;
}

void NativeStackCache::Impl::unwind_thread(Session& s, ThreadInfo& t) {
  const KernelTaskView& k = *t.kernel;
  UnwindState& st = s.state;
  st.tid = t.tid;
  st.machine = k.user_machine;
  st.nregs = k.user_nregs;
  st.regs = k.user_regs.data();
  uint64_t sp = k.user_regs[static_cast<size_t>(sp_regno(k.user_machine))];
  st.copy_base = sp;
  st.copy_len = copy_stack(st.pid, sp, st.copy);
  uint64_t reads_before = st.remote_reads;

  WalkState walk;
  walk.sp_reg = sp_regno(k.user_machine);
  auto started = std::chrono::steady_clock::now();
  int rc = dwfl_getthread_frames(s.dwfl, t.tid, cb_frame, &walk);
  // Running off the end of the CFI (rc -1) after some frames is how most
  // stacks end; only no frame at all is a failure.
  std::string error = rc == -1 && walk.frames.empty() ? dwfl_error() : "";
  stats.unwind_ms += ms_since(started);
  stats.remote_reads += st.remote_reads - reads_before;
  st.regs = nullptr;

  if (walk.frames.empty()) {
    ++stats.threads_failed;
    t.native_stack_error = "failed to unwind: " + (error.empty() ? std::string("no frames") : error);
    return;
  }
  started = std::chrono::steady_clock::now();
  t.native_stack.clear();
  t.native_stack_error.clear();
  for (const RawFrame& raw : walk.frames) {
    UserFrame f;
    f.kind = UserFrame::Kind::Native;
    f.addr = raw.pc;
    // A return address points after the call: pc - 1 is still inside the
    // calling function (the call may be its last instruction).
    Dwarf_Addr lookup = raw.activation ? raw.pc : raw.pc - 1;
    if (Dwfl_Module* mod = dwfl_addrmodule(s.dwfl, lookup)) {
      const ModuleMeta& meta = module_meta(s, mod);
      f.file = meta.path;
      f.build_id = meta.build_id;
      f.module_offset = raw.pc - meta.bias;
      f.function = symbolizer.name_in_module(mod, meta.bias, meta.build_id, lookup, stats);
      if (!f.function.empty()) ++stats.frames_symbolized;
    }
    t.native_stack.push_back(std::move(f));
  }
  stats.frames += t.native_stack.size();
  stats.symbolize_ms += ms_since(started);
  ++stats.threads_unwound;
}

NativeStackCache::NativeStackCache() : impl_(std::make_unique<Impl>()) {}
NativeStackCache::~NativeStackCache() = default;

std::string NativeStackCache::unwind_process(ProcessInfo& p, int mem_pid, const std::vector<Mapping>* maps) {
  std::vector<ThreadInfo*> blocked;
  for (auto& t : p.threads) {
    // A running thread's saved registers are from its last kernel entry, not
    // where it is now; a zombie's stack is gone.
    if (!t.kernel || !t.kernel->has_user_regs || t.kernel->on_cpu || t.state == 'Z' || t.state == 'X')
      continue;
    if (t.kernel->user_machine != EM_X86_64 && t.kernel->user_machine != EM_AARCH64) continue;
    blocked.push_back(&t);
  }
  if (blocked.empty()) return "";

  std::lock_guard lock(impl_->mu);
  t_current_pid = mem_pid;
  auto started = std::chrono::steady_clock::now();
  auto session = impl_->session_for(mem_pid, maps);
  impl_->stats.report_ms += ms_since(started);
  if (!session) {
    t_current_pid = 0;
    impl_->stats.threads_failed += blocked.size();
    for (ThreadInfo* t : blocked) t->native_stack_error = session.error();
    return session.error();
  }
  Session& s = **session;
  s.state.pid = mem_pid;
  for (ThreadInfo* t : blocked) impl_->unwind_thread(s, *t);
  t_current_pid = 0;
  return "";
}

void NativeStackCache::symbolize_file_frames(std::vector<UserFrame>& frames) {
  std::lock_guard lock(impl_->mu);
  for (size_t i = 0; i < frames.size(); ++i) {
    UserFrame& f = frames[i];
    if (f.kind != UserFrame::Kind::Native || !f.function.empty() || f.file.empty() || f.file[0] != '/')
      continue;
    impl_->symbolizer.name_file_frame(f, i == 0, impl_->stats);
  }
}

NativeStackStats NativeStackCache::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

NativeStackCache& process_native_stack_cache() {
  static NativeStackCache cache;
  return cache;
}

}  // namespace hangtrace
