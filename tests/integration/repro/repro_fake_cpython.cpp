// A process that lies to hangtrace's Python stack reader: it exports a
// `_PyRuntime` (and `Py_Version` 3.13.0) whose head is a _Py_DebugOffsets
// table with offsets of its own, and lays out an interpreter / thread-state /
// frame graph built to trap a reader. The test runs a copy of this binary
// named python3.13, so hangtrace takes it for CPython 3.13 and walks it.
//
//   interpreters: head -> B -> C -> A -> D1 -> ... -> D100 -> A (a cycle, past
//                 any sane bound: 103 interpreters)
//   B: 8 thread states whose list, frames and thread ids the "mutator" thread
//      rewrites without pause: cycles, NULL, unmapped and misaligned pointers
//   C: its thread list points into unmapped memory
//   A: one thread state per parked thread below, then 5,000 more that name
//      no thread
//   parked threads (tid in the READY line), what their frames hold:
//     loop     two frames whose `previous` point at each other
//     unmapped current_frame points into unmapped memory
//     deep     100,000 frames, the line table claiming 2^62 bytes
//     names    frames whose names hold terminal escapes, control characters,
//              a C1 CSI and a lone surrogate (invalid UTF-8 once encoded), one
//              name 2^31 characters long, a line table that runs into
//              unmapped memory
//     huge     a code object whose co_filename claims 2^40 characters
//     notcode  a frame whose code object is an "int"
//     shims    100,000 shim frames (owned by the C stack), no Python frame
//     shared0..7  250 frames each, each of its own code object, all 2,000
//              sharing one line table of 1 MiB (a reader that keeps each
//              decoded copy holds 2 GiB)
//
//   argv: none. Prints
//   READY pid=P loop=T unmapped=T deep=T names=T huge=T notcode=T shims=T
//         shared0=T .. shared7=T mutator=T
//   and stays until killed.
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hangtrace/python_debug_offsets.h"

extern "C" {
// What hangtrace looks up in the ELF symbol table (python_runtime.cpp).
__attribute__((used, aligned(64))) unsigned char _PyRuntime[4096];
extern const uint32_t Py_Version;
__attribute__((used)) const uint32_t Py_Version = 0x030d00f0;  // 3.13.0 final
}

namespace {

using hangtrace::DebugOffsets313;  // the fields are CPython's, the values this file's layout below

// The layout the table announces.
constexpr uint64_t kInterpretersHead = 640;  // in _PyRuntime, past the table
constexpr uint64_t kInterpNext = 0, kInterpThreads = 8, kInterpSize = 64;
constexpr uint64_t kTsNext = 8, kTsInterp = 16, kTsFrame = 24, kTsNativeId = 40, kTsSize = 64;
constexpr uint64_t kFrExecutable = 0, kFrPrevious = 8, kFrInstr = 16, kFrOwner = 24, kFrSize = 32;
constexpr uint64_t kObType = 8;
constexpr uint64_t kCoFilename = 16, kCoName = 24, kCoQualname = 32, kCoLinetable = 40, kCoFirstLine = 48,
                   kCoAdaptive = 64, kCoSize = 128;
constexpr uint64_t kTpName = 24, kTypeSize = 64;
constexpr uint64_t kBytesSize = 16, kBytesData = 32;
constexpr uint64_t kStrLength = 16, kStrState = 32, kStrAsciiData = 40, kStrCompactData = 56;

// All fake objects come from one mapping, 8-aligned (as real objects are).
class Arena {
 public:
  explicit Arena(size_t size) : size_(size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      perror("mmap");
      _exit(1);
    }
    base_ = static_cast<uint8_t*>(p);
  }
  uint64_t alloc(size_t n) {
    used_ = (used_ + 7) & ~size_t{7};
    if (used_ + n > size_) {
      std::fprintf(stderr, "arena full\n");
      _exit(1);
    }
    uint64_t at = reinterpret_cast<uint64_t>(base_ + used_);
    used_ += n;
    return at;
  }

 private:
  uint8_t* base_ = nullptr;
  size_t size_, used_ = 0;
};

void put64(uint64_t addr, uint64_t value) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(addr), value, __ATOMIC_RELAXED);
}
void put32(uint64_t addr, uint32_t value) { std::memcpy(reinterpret_cast<void*>(addr), &value, 4); }

// An address in no mapping: a page mapped and unmapped again.
uint64_t unmapped_address() {
  void* p = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(p, 4096);
  return reinterpret_cast<uint64_t>(p);
}

Arena arena(24 << 20);

uint64_t type_named(const char* name) {
  uint64_t text = arena.alloc(std::strlen(name) + 1);
  std::memcpy(reinterpret_cast<void*>(text), name, std::strlen(name) + 1);
  uint64_t type = arena.alloc(kTypeSize);
  put64(type + kTpName, text);
  return type;
}

const uint64_t type_code = type_named("code");
const uint64_t type_str = type_named("str");
const uint64_t type_bytes = type_named("bytes");
const uint64_t type_int = type_named("int");

// A compact str of `kind` (1, 2, 4 bytes a character) holding `chars`, its
// length field saying `claimed` (the real length unless given).
uint64_t str_object(const std::u32string& chars, unsigned kind, uint64_t claimed = 0) {
  bool ascii = kind == 1;
  for (char32_t c : chars) ascii = ascii && c < 0x80;
  uint64_t data_at = ascii ? kStrAsciiData : kStrCompactData;
  uint64_t obj = arena.alloc(data_at + (chars.size() + 1) * kind);
  put64(obj + kObType, type_str);
  put64(obj + kStrLength, claimed ? claimed : chars.size());
  put32(obj + kStrState, (kind << 2) | (1u << 5) | (ascii ? 1u << 6 : 0));
  for (size_t i = 0; i < chars.size(); ++i) {
    uint32_t c = chars[i];
    std::memcpy(reinterpret_cast<void*>(obj + data_at + i * kind), &c, kind);
  }
  return obj;
}

uint64_t ascii(const std::string& s) { return str_object(std::u32string(s.begin(), s.end()), 1); }

// A bytes object claiming `claimed` bytes, holding `data`.
uint64_t bytes_object(const std::vector<uint8_t>& data, uint64_t claimed) {
  uint64_t obj = arena.alloc(kBytesData + data.size() + 1);
  put64(obj + kObType, type_bytes);
  put64(obj + kBytesSize, claimed);
  std::memcpy(reinterpret_cast<void*>(obj + kBytesData), data.data(), data.size());
  return obj;
}

// One location entry (no columns, line delta 0): every instruction on the first line.
const std::vector<uint8_t> kOneLine = {0x80 | (13 << 3), 0x00};

uint64_t code_object(uint64_t qualname, uint64_t filename, int first_line, uint64_t linetable) {
  uint64_t code = arena.alloc(kCoSize);
  put64(code + kObType, type_code);
  put64(code + kCoFilename, filename);
  put64(code + kCoName, qualname);
  put64(code + kCoQualname, qualname);
  put64(code + kCoLinetable, linetable);
  put32(code + kCoFirstLine, static_cast<uint32_t>(first_line));
  return code;
}

// A frame; `owner` 0: a thread's, 3 (FRAME_OWNED_BY_CSTACK): a C shim.
uint64_t frame(uint64_t code, uint64_t previous, uint8_t owner = 0) {
  uint64_t f = arena.alloc(kFrSize);
  put64(f + kFrExecutable, code);
  put64(f + kFrPrevious, previous);
  put64(f + kFrInstr, code + kCoAdaptive);
  *reinterpret_cast<uint8_t*>(f + kFrOwner) = owner;
  return f;
}

uint64_t thread_state(uint64_t interp, uint64_t current_frame, int tid) {
  uint64_t ts = arena.alloc(kTsSize);
  put64(ts + kTsInterp, interp);
  put64(ts + kTsFrame, current_frame);
  put64(ts + kTsNativeId, static_cast<uint64_t>(tid));
  return ts;
}

int gettid_now() { return static_cast<int>(gettid()); }

// A parked thread, named `name`; its tid is published in `tid`.
void park(const char* name, std::atomic<int>* tid) {
  prctl(PR_SET_NAME, name);
  tid->store(gettid_now());
  for (;;) pause();
}

uint64_t xorshift(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

}  // namespace

int main() {
  const uint64_t unmapped = unmapped_address();

  DebugOffsets313 d{};
  std::memcpy(d.cookie, "xdebugpy", 8);
  d.version = Py_Version;
  d.runtime_state = {1024, 8, kInterpretersHead};
  d.interpreter_state.size = kInterpSize;
  d.interpreter_state.next = kInterpNext;
  d.interpreter_state.threads_head = kInterpThreads;
  d.thread_state.size = kTsSize;
  d.thread_state.next = kTsNext;
  d.thread_state.interp = kTsInterp;
  d.thread_state.current_frame = kTsFrame;
  d.thread_state.native_thread_id = kTsNativeId;
  d.interpreter_frame = {kFrSize, kFrPrevious, kFrExecutable, kFrInstr, 0, kFrOwner};
  d.code_object = {kCoSize,      kCoFilename, kCoName, kCoQualname, kCoLinetable,
                   kCoFirstLine, 0,           0,       0,           kCoAdaptive};
  d.pyobject = {16, kObType};
  d.type_object = {kTypeSize, kTpName, 0, 0};
  d.bytes_object = {kBytesData, kBytesSize, kBytesData};
  d.unicode_object = {kStrCompactData, kStrState, kStrLength, kStrAsciiData};

  // The threads whose stacks are traps, parked before their states are laid out.
  constexpr int kShared = 8;
  std::atomic<int> loop_tid{0}, unmapped_tid{0}, deep_tid{0}, names_tid{0}, huge_tid{0}, notcode_tid{0},
      shims_tid{0}, mutator_tid{0};
  std::atomic<int> shared_tids[kShared] = {};
  std::vector<std::thread> parked;
  std::vector<std::pair<const char*, std::atomic<int>*>> named = {
      {"py-loop", &loop_tid},   {"py-unmapped", &unmapped_tid}, {"py-deep", &deep_tid},
      {"py-names", &names_tid}, {"py-huge", &huge_tid},         {"py-notcode", &notcode_tid},
      {"py-shims", &shims_tid}};
  for (auto& tid : shared_tids) named.emplace_back("py-shared", &tid);
  for (const auto& [name, tid] : named) parked.emplace_back(park, name, tid);
  for (const auto& [name, tid] : named)
    while (tid->load() == 0) sched_yield();

  const uint64_t file = ascii("/fake/train.py");
  // loop: two frames, each the other's caller.
  uint64_t loop_code = code_object(ascii("loop_frame"), file, 10, bytes_object(kOneLine, kOneLine.size()));
  uint64_t loop_a = frame(loop_code, 0), loop_b = frame(loop_code, loop_a);
  put64(loop_a + kFrPrevious, loop_b);
  // deep: 100,000 frames, the line table claiming 2^62 bytes.
  uint64_t deep_code = code_object(ascii("deep_frame"), file, 20, bytes_object(kOneLine, uint64_t{1} << 62));
  uint64_t deep = 0;
  for (int i = 0; i < 100000; ++i) deep = frame(deep_code, deep);
  // names: what a terminal would act on, and text that is no UTF-8.
  uint64_t evil_name = ascii("evil\x1b]0;owned\x07\x1b[2J\x1b[31mred\rback\nline\x7f\x01");
  uint64_t evil_file = str_object(
      U"/fake/\x9b"
      U"31m\xd800\x1b[1mbold\x07.py",
      2);
  // A line table that claims 1 MiB of which only the first page is mapped.
  uint64_t short_table = reinterpret_cast<uint64_t>(
      mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  munmap(reinterpret_cast<void*>(short_table + 4096), 4096);
  put64(short_table + kObType, type_bytes);
  put64(short_table + kBytesSize, 1 << 20);
  uint64_t names_inner = code_object(evil_name, evil_file, 30, short_table);
  std::u32string long_text(1100, U'A');
  uint64_t long_name = str_object(long_text, 4, uint64_t{1} << 31);
  uint64_t names_outer = code_object(long_name, file, 40, bytes_object(kOneLine, kOneLine.size()));
  uint64_t names_frames = frame(names_inner, frame(names_outer, 0));
  // huge: co_filename claims 2^40 characters.
  uint64_t huge_code =
      code_object(ascii("huge"), str_object(U"x", 1, uint64_t{1} << 40), 50, bytes_object(kOneLine, 2));
  // notcode: the frame's code object is an int.
  uint64_t not_code = arena.alloc(kCoSize);
  put64(not_code + kObType, type_int);
  // shims: 100,000 frames of the C stack's, no Python frame among them.
  uint64_t shims = 0;
  for (int i = 0; i < 100000; ++i) shims = frame(loop_code, shims, 3);
  // shared: 2,000 code objects, one line table of 1 MiB (every entry: the first line).
  std::vector<uint8_t> big_table;
  while (big_table.size() < (1u << 20)) big_table.insert(big_table.end(), kOneLine.begin(), kOneLine.end());
  const uint64_t shared_table = bytes_object(big_table, big_table.size());
  uint64_t shared_stacks[kShared] = {};
  for (int t = 0; t < kShared; ++t)
    for (int i = 0; i < 250; ++i)
      shared_stacks[t] = frame(code_object(ascii("shared_frame"), file, 60, shared_table), shared_stacks[t]);

  // Interpreters: head -> B -> C -> A -> D1 .. D100 -> A.
  uint64_t interp_a = arena.alloc(kInterpSize), interp_b = arena.alloc(kInterpSize),
           interp_c = arena.alloc(kInterpSize);
  put64(reinterpret_cast<uint64_t>(_PyRuntime) + kInterpretersHead, interp_b);
  put64(interp_b + kInterpNext, interp_c);
  put64(interp_c + kInterpNext, interp_a);
  put64(interp_c + kInterpThreads, unmapped);
  uint64_t prev = interp_a;
  for (int i = 0; i < 100; ++i) {
    uint64_t di = arena.alloc(kInterpSize);
    put64(prev + kInterpNext, di);
    prev = di;
  }
  put64(prev + kInterpNext, interp_a);

  // A: the parked threads' states, then 5,000 that name no thread.
  std::vector<uint64_t> a_states = {thread_state(interp_a, loop_a, loop_tid),
                                    thread_state(interp_a, unmapped, unmapped_tid),
                                    thread_state(interp_a, deep, deep_tid),
                                    thread_state(interp_a, names_frames, names_tid),
                                    thread_state(interp_a, frame(huge_code, 0), huge_tid),
                                    thread_state(interp_a, frame(not_code, 0), notcode_tid),
                                    thread_state(interp_a, shims, shims_tid)};
  for (int t = 0; t < kShared; ++t)
    a_states.push_back(thread_state(interp_a, shared_stacks[t], shared_tids[t]));
  for (int i = 0; i < 5000; ++i) a_states.push_back(thread_state(interp_a, deep, 0));
  for (size_t i = 0; i + 1 < a_states.size(); ++i) put64(a_states[i] + kTsNext, a_states[i + 1]);
  put64(interp_a + kInterpThreads, a_states.front());

  // B: rewritten while hangtrace reads it.
  std::vector<uint64_t> pool;
  for (int i = 0; i < 8; ++i) pool.push_back(thread_state(interp_b, 0, 0));
  put64(interp_b + kInterpThreads, pool[0]);
  std::thread mutator([&] {
    prctl(PR_SET_NAME, "py-mutator");
    mutator_tid = gettid_now();
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(getpid());
    const uint64_t frames[] = {0, loop_a, unmapped, deep, names_frames, unmapped + 3, ~uint64_t{0} << 47};
    for (uint64_t round = 0;; ++round) {
      uint64_t r = xorshift(seed);
      uint64_t ts = pool[r % pool.size()];
      uint64_t nexts[] = {0, pool[(r >> 8) % pool.size()], ts, unmapped, pool[(r >> 16) % pool.size()] + 3};
      int tids[] = {0, static_cast<int>(getpid()), mutator_tid.load(), 1};
      put64(ts + kTsNext, nexts[(r >> 24) % 5]);
      put64(ts + kTsFrame, frames[(r >> 32) % 7]);
      put64(ts + kTsNativeId, static_cast<uint64_t>(tids[(r >> 40) % 4]));
      put64(interp_b + kInterpThreads, (r >> 48) % 16 ? pool[(r >> 52) % pool.size()] : unmapped);
      if (round % 64 == 0) {  // busy, not a whole CPU
        timespec pause_for{0, 50'000};
        nanosleep(&pause_for, nullptr);
      }
    }
  });
  while (mutator_tid.load() == 0) sched_yield();

  // The table last: until it is in place the process is no CPython.
  std::memcpy(_PyRuntime, &d, sizeof d);
  std::printf("READY pid=%d loop=%d unmapped=%d deep=%d names=%d huge=%d notcode=%d shims=%d", getpid(),
              loop_tid.load(), unmapped_tid.load(), deep_tid.load(), names_tid.load(), huge_tid.load(),
              notcode_tid.load(), shims_tid.load());
  for (int t = 0; t < kShared; ++t) std::printf(" shared%d=%d", t, shared_tids[t].load());
  std::printf(" mutator=%d\n", mutator_tid.load());
  std::fflush(stdout);
  for (;;) pause();
}
