#include "python_walker.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "hangtrace/collectives.h"
#include "procmem.h"
#include "python_objects.h"
#include "python_stacks.h"  // the line-table decoders

namespace hangtrace::python {

Result<std::vector<uint8_t>> Walker::read(uint64_t addr, size_t n, const char* what) {
  if (!plausible_pointer(addr)) return make_error(fmt::format("bad {} pointer {:#x}", what, addr));
  auto bytes = mem_.read(addr, n);
  if (!bytes) return make_error(fmt::format("cannot read {} at {:#x}", what, addr));
  return bytes;
}

Result<uint64_t> Walker::read_ptr(uint64_t addr, const char* what) {
  auto b = read(addr, 8, what);
  if (!b) return make_error(b.error());
  return load_u64(*b, 0);
}

std::string Walker::type_name(uint64_t object) {
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

Result<std::string> Walker::read_unicode(uint64_t addr, const char* what) {
  auto head = read(addr, o_.unicode_compact_data, what);
  if (!head) return make_error(head.error());
  uint64_t length = load_u64(*head, o_.unicode_length);
  uint32_t state = load_u32(*head, o_.unicode_state);
  unsigned kind = (state >> o_.unicode_kind_shift) & 7;
  bool compact = (state >> o_.unicode_compact_shift) & 1;
  bool ascii = (state >> o_.unicode_ascii_shift) & 1;
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

const CodeInfo& Walker::code(uint64_t addr) {
  if (auto it = codes_.find(addr); it != codes_.end()) return it->second;
  CodeInfo info = decode_code(addr);
  if (!info.ok) {  // not cached: the next walk may find a real code object there
    failed_ = std::move(info);
    return failed_;
  }
  const size_t bytes = info.linetable.size() + info.function.size() + info.file.size() + sizeof(CodeInfo);
  if (codes_.size() > 65536 || codes_bytes_ + bytes > kMaxCodeCacheBytes) {
    codes_.clear();
    codes_bytes_ = 0;
  }
  codes_bytes_ += bytes;
  return codes_[addr] = std::move(info);
}

CodeInfo Walker::decode_code(uint64_t addr) {
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

int Walker::line(const CodeInfo& c, int64_t byte_offset) const {
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

uint64_t Walker::bytecode_of(uint64_t code_addr, const std::vector<uint8_t>& frame) {
  const uint64_t own = code_addr + o_.code_adaptive;
  if (!o_.frame_tlbc_index || !o_.code_tlbc) return own;
  const auto index = static_cast<int32_t>(load_u32(frame, o_.frame_tlbc_index));
  if (index <= 0 || index > 4096) return own;
  auto array = read_ptr(code_addr + o_.code_tlbc, "co_tlbc");
  if (!array) return own;
  auto size = read_ptr(*array, "co_tlbc size");
  if (!size || *size <= static_cast<uint64_t>(index) || *size > 4096) return own;
  auto copy = read_ptr(*array + 8 + 8 * static_cast<uint64_t>(index), "co_tlbc entry");
  return copy && plausible_pointer(*copy) ? *copy : own;
}

Result<UserFrame> Walker::frame_of(const std::vector<uint8_t>& f) {
  const bool objects = o_.layout == FrameLayout::FrameObjects;
  uint64_t code_addr = load_u64(f, o_.frame_code);
  if (o_.stack_refs) code_addr = stack_ref_object(code_addr);
  const CodeInfo& c = code(code_addr);
  if (!c.ok) return make_error(c.error);
  int64_t offset = 0;
  if (objects) {
    // f_lasti: the last instruction started, -1 before the first.
    offset = static_cast<int64_t>(static_cast<int32_t>(load_u32(f, o_.frame_lasti))) * o_.lasti_unit;
  } else {
    uint64_t instr = load_u64(f, o_.frame_prev_instr);
    offset = static_cast<int64_t>(instr - bytecode_of(code_addr, f));
  }
  UserFrame uf;
  uf.kind = UserFrame::Kind::Python;
  uf.function = c.function;
  uf.file = c.file;
  uf.line = line(c, offset);
  uf.python_entry = objects || (o_.frame_is_entry && f[o_.frame_is_entry] != 0);
  return uf;
}

int64_t Walker::refcount(uint64_t object) {
  auto head = read(object, 24, "object");
  if (!head) return -1;
  if (o_.free_threaded) {
    // ob_ref_local (u32 at 12) + ob_ref_shared (at 16, the count above two flag bits).
    int64_t shared = static_cast<int64_t>(load_u64(*head, 16)) >> 2;
    int64_t n = static_cast<int64_t>(load_u32(*head, 12)) + shared;
    return n >= 0 && n < (int64_t{1} << 40) ? n : -1;
  }
  // ob_refcnt; 3.12+ keep it in the low 32 bits (the high ones flag immortals).
  uint64_t raw = load_u64(*head, 0);
  int64_t n = o_.minor >= 12 ? static_cast<int64_t>(raw & 0xffffffffu) : static_cast<int64_t>(raw);
  return n >= 0 && n < (int64_t{1} << 40) ? n : -1;
}

std::optional<int64_t> Walker::int_argument(uint64_t frame, int position) {
  if (!o_.frame_localsplus || !o_.long_digit || position < 0 || position > 255) return std::nullopt;
  auto slot = read_ptr(frame + o_.frame_localsplus + 8 * static_cast<uint64_t>(position), "frame local");
  if (!slot) return std::nullopt;
  const uint64_t object = o_.stack_refs ? stack_ref_object(*slot) : *slot;
  if (!plausible_pointer(object)) return std::nullopt;
  ObjectReader objects(*this);
  auto value = objects.unsigned_int(object);
  if (!value || *value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(*value);
}

Result<std::vector<UserFrame>> Walker::stack(const std::vector<uint8_t>& tstate) {
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
    if (visited.size() >= kMaxFrameHops)     // no real stack: shim frames without end
      return make_error(
          fmt::format("frame chain runs past {} frames, {} of them Python's", kMaxFrameHops, frames.size()));
    if (!visited.insert(frame).second) return make_error("frame chain loops");
    auto f = read(frame, o_.frame_read_size, "frame");
    if (!f) return make_error(f.error());
    uint64_t next = load_u64(*f, o_.frame_previous);
    if (objects && type_name(frame) != "frame")
      return make_error(fmt::format("{:#x} is not a frame object", frame));
    if (!objects && o_.owner_entry >= 0 && (*f)[o_.frame_owner] >= o_.owner_entry) {
      if (!frames.empty()) frames.back().python_entry = true;
      frame = next;
      continue;
    }
    auto uf = frame_of(*f);
    if (!uf) return make_error(uf.error());
    if (int position = identity_argument_position(uf->file, uf->function); position >= 0)
      uf->argument = int_argument(frame, position);
    frames.push_back(std::move(*uf));
    frame = next;
  }
  return frames;
}

}  // namespace hangtrace::python
