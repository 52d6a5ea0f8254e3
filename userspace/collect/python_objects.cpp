// Layouts (3.11-3.13 measured with gdb on pyenv's 3.11.7, 3.12.1, 3.13.0;
// `ptype /o struct _dictkeysobject`, `struct _dictvalues`):
//   PyDictObject      ma_keys, ma_values (a split table's values, or NULL)
//   PyDictKeysObject  dk_log2_size u8 at 8, dk_log2_index_bytes u8 at 9,
//                     dk_kind u8 at 10, dk_nentries at 24, dk_indices at 32;
//                     the entries follow the 1 << dk_log2_index_bytes index
//                     bytes: {hash, key, value} for DICT_KEYS_GENERAL (0),
//                     {key, value} for DICT_KEYS_UNICODE (1) and SPLIT (2)
//   PyDictValues      values[] (3.13: after a 4-byte header, at 8)
// An instance's attributes live in a __dict__ at tp_dictoffset, or (types
// with Py_TPFLAGS_MANAGED_DICT) beside the object, keyed by the keys its
// heap type shares among its instances (ht_cached_keys):
//   3.11  obj[-3]: the dict, or NULL and obj[-4]: the values
//   3.12  obj[-3]: the dict, or the values' address minus one (bit 0 set)
//   3.13  obj[-3]: the dict, or NULL and (Py_TPFLAGS_INLINE_VALUES) the
//         values inside the object at tp_basicsize, while their `valid` byte says so
#include "python_objects.h"

#include <fmt/format.h>

#include <algorithm>

#include "procmem.h"

namespace hangtrace::python {

namespace {

constexpr uint64_t kTpFlagsInlineValues = 1u << 2;  // 3.13+
constexpr uint64_t kTpFlagsManagedDict = 1u << 4;   // 3.11+
constexpr uint64_t kTpFlagsHeapType = 1u << 9;
constexpr int kDictKeysGeneral = 0;
constexpr int kMaxTypeDepth = 32;
constexpr uint64_t kKeysHeader = 32;  // sizeof(PyDictKeysObject): where dk_indices starts

}  // namespace

const ObjectReader::TypeInfo* ObjectReader::type_info(uint64_t type) {
  if (auto it = types_.find(type); it != types_.end()) return &it->second;
  const uint64_t size = std::max({o_.type_flags, o_.type_base, o_.type_dictoffset, o_.type_basicsize,
                                  o_.type_name, o_.heap_type_cached_keys}) +
                        8;
  auto b = w_.read(type, size, "type object");
  if (!b) return nullptr;
  TypeInfo t;
  t.flags = load_u64(*b, o_.type_flags);
  t.basicsize = static_cast<int64_t>(load_u64(*b, o_.type_basicsize));
  t.dictoffset = static_cast<int64_t>(load_u64(*b, o_.type_dictoffset));
  t.base = load_u64(*b, o_.type_base);
  if ((t.flags & kTpFlagsHeapType) && o_.heap_type_cached_keys)
    t.cached_keys = load_u64(*b, o_.heap_type_cached_keys);
  // tp_name: a C string, any alignment.
  if (uint64_t name = load_u64(*b, o_.type_name); name >= 4096 && name < (uint64_t{1} << 47)) {
    for (uint8_t c : w_.memory().read_prefix(name, 64)) {
      if (!c) break;
      t.name += static_cast<char>(c);
    }
  }
  if (types_.size() >= 4096) types_.clear();
  return &(types_[type] = std::move(t));
}

const ObjectReader::TypeInfo* ObjectReader::type_of(uint64_t object) {
  auto type = w_.read_ptr(object + o_.object_type, "object type");
  return type ? type_info(*type) : nullptr;
}

bool ObjectReader::is_instance(uint64_t object, std::string_view type_name) {
  auto type = w_.read_ptr(object + o_.object_type, "object type");
  if (!type) return false;
  uint64_t at = *type;
  for (int depth = 0; depth < kMaxTypeDepth && plausible_pointer(at); ++depth) {
    const TypeInfo* t = type_info(at);
    if (!t) return false;
    if (t->name == type_name) return true;
    at = t->base;
  }
  return false;
}

bool ObjectReader::key_equals(uint64_t str, std::string_view key) {
  auto head = w_.read(str, o_.unicode_compact_data, "dict key");
  if (!head || load_u64(*head, o_.unicode_length) != key.size()) return false;
  auto s = w_.read_unicode(str, "dict key");
  return s && *s == key;
}

Result<std::vector<std::pair<uint64_t, uint64_t>>> ObjectReader::entries(uint64_t keys, uint64_t values,
                                                                         size_t limit) {
  auto head = w_.read(keys, kKeysHeader, "dict keys");
  if (!head) return make_error(head.error());
  const unsigned log2_size = (*head)[8], log2_index_bytes = (*head)[9], kind = (*head)[10];
  const auto used = static_cast<int64_t>(load_u64(*head, 24));  // dk_nentries
  // Index entries are 1, 2, 4 or 8 bytes; at most 2/3 of the slots are used.
  if (log2_size < 3 || log2_size > 30 || log2_index_bytes < log2_size || log2_index_bytes > log2_size + 3 ||
      kind > 2 || used < 0 || used > (int64_t{1} << log2_size))
    return make_error(fmt::format("dict keys at {:#x} are inconsistent", keys));
  if (static_cast<uint64_t>(used) > kMaxDictEntries)
    return make_error(fmt::format("a dict of {} entries is not read", used));
  const size_t n = std::min<size_t>(static_cast<size_t>(used), limit);
  const uint64_t entry_size = kind == kDictKeysGeneral ? 24 : 16;
  const uint64_t key_at = kind == kDictKeysGeneral ? 8 : 0;
  const uint64_t first = keys + kKeysHeader + (uint64_t{1} << log2_index_bytes);
  std::vector<std::pair<uint64_t, uint64_t>> out;
  if (n == 0) return out;
  auto table = w_.read(first, n * entry_size, "dict entries");
  if (!table) return make_error(table.error());
  std::vector<uint8_t> split;
  if (values) {
    auto v = w_.read(values + o_.dict_values_items, n * 8, "dict values");
    if (!v) return make_error(v.error());
    split = std::move(*v);
  }
  for (size_t i = 0; i < n; ++i) {
    const uint64_t key = load_u64(*table, i * entry_size + key_at);
    const uint64_t value = values ? load_u64(split, i * 8) : load_u64(*table, i * entry_size + key_at + 8);
    if (key == 0 || value == 0) continue;  // deleted, or a split slot this instance never set
    out.emplace_back(key, value);
  }
  return out;
}

Result<uint64_t> ObjectReader::lookup(uint64_t keys, uint64_t values, std::string_view key) {
  auto all = entries(keys, values, kMaxDictEntries);
  if (!all) return make_error(all.error());
  for (const auto& [k, v] : *all)
    if (plausible_pointer(k) && key_equals(k, key)) return v;
  return uint64_t{0};
}

Result<uint64_t> ObjectReader::dict_get(uint64_t dict, std::string_view key) {
  auto head = w_.read(dict, std::max(o_.dict_keys, o_.dict_values) + 8, "dict");
  if (!head) return make_error(head.error());
  const uint64_t values = load_u64(*head, o_.dict_values);
  return lookup(load_u64(*head, o_.dict_keys), values, key);
}

Result<std::vector<std::pair<uint64_t, uint64_t>>> ObjectReader::dict_items(uint64_t dict, size_t limit) {
  auto head = w_.read(dict, std::max(o_.dict_keys, o_.dict_values) + 8, "dict");
  if (!head) return make_error(head.error());
  return entries(load_u64(*head, o_.dict_keys), load_u64(*head, o_.dict_values), limit);
}

Result<uint64_t> ObjectReader::attribute(uint64_t object, std::string_view name) {
  const TypeInfo* t = type_of(object);
  if (!t) return make_error(fmt::format("cannot read the type of {:#x}", object));
  if (!(t->flags & kTpFlagsManagedDict) || o_.managed_dict == ManagedDict::None) {
    if (t->dictoffset <= 0 || t->dictoffset > 4096) return uint64_t{0};
    auto dict = w_.read_ptr(object + static_cast<uint64_t>(t->dictoffset), "__dict__");
    if (!dict) return make_error(dict.error());
    return *dict ? dict_get(*dict, name) : Result<uint64_t>(uint64_t{0});
  }
  if (object < 32) return uint64_t{0};
  auto slot = w_.read_ptr(object - 24, "managed dict");
  if (!slot) return make_error(slot.error());
  uint64_t values = 0;
  switch (o_.managed_dict) {
    case ManagedDict::Pointers311:
      if (*slot) return dict_get(*slot, name);
      if (auto v = w_.read_ptr(object - 32, "instance values")) values = *v;
      break;
    case ManagedDict::Tagged312:
      if (!(*slot & 1)) return *slot ? dict_get(*slot, name) : Result<uint64_t>(uint64_t{0});
      values = *slot + 1;  // stored as the values' address minus one
      break;
    case ManagedDict::Inline313: {
      if (*slot) return dict_get(*slot, name);
      if (!(t->flags & kTpFlagsInlineValues) || t->basicsize <= 0 || t->basicsize > 4096) return uint64_t{0};
      values = object + static_cast<uint64_t>(t->basicsize);
      auto header = w_.read(values, 4, "inline values");
      if (!header || (*header)[3] == 0) return uint64_t{0};  // `valid`: 0 once a dict took them over
      break;
    }
    case ManagedDict::None:
      break;
  }
  if (!values || !t->cached_keys) return uint64_t{0};
  return lookup(t->cached_keys, values, name);
}

Result<std::vector<uint64_t>> ObjectReader::set_members(uint64_t set, size_t limit) {
  auto head = w_.read(set, std::max({o_.set_used, o_.set_table, o_.set_mask}) + 8, "set");
  if (!head) return make_error(head.error());
  const uint64_t table = load_u64(*head, o_.set_table), mask = load_u64(*head, o_.set_mask);
  if (mask >= kMaxSetSlots || ((mask + 1) & mask) != 0)
    return make_error(fmt::format("a set of {} slots is not read", mask + 1));
  // setentry {PyObject *key; Py_hash_t hash}; empty slots hold NULL,
  // deleted ones the dummy key, whose type CPython names "<dummy key> type".
  auto slots = w_.read(table, (mask + 1) * 16, "set table");
  if (!slots) return make_error(slots.error());
  std::vector<uint64_t> out;
  for (uint64_t i = 0; i <= mask && out.size() < limit; ++i) {
    const uint64_t key = load_u64(*slots, i * 16);
    if (!plausible_pointer(key)) continue;
    if (w_.type_name(key).rfind("<dummy", 0) == 0) continue;
    out.push_back(key);
  }
  return out;
}

Result<std::vector<uint64_t>> ObjectReader::sequence_items(uint64_t sequence, size_t limit) {
  const std::string type = w_.type_name(sequence);
  if (type != "list" && type != "tuple")
    return make_error(fmt::format("{:#x} is not a list or tuple", sequence));
  auto head = w_.read(sequence, o_.sequence_items + 8, "sequence");
  if (!head) return make_error(head.error());
  const auto size = static_cast<int64_t>(load_u64(*head, o_.var_size));
  if (size < 0 || static_cast<uint64_t>(size) > kMaxSequenceItems)
    return make_error(fmt::format("a {} of {} items is not read", type, size));
  const size_t n = std::min<size_t>(static_cast<size_t>(size), limit);
  std::vector<uint64_t> out;
  if (n == 0) return out;
  // A list points at its items; a tuple holds them.
  const uint64_t items = type == "list" ? load_u64(*head, o_.sequence_items) : sequence + o_.sequence_items;
  auto b = w_.read(items, n * 8, "sequence items");
  if (!b) return make_error(b.error());
  for (size_t i = 0; i < n; ++i) out.push_back(load_u64(*b, i * 8));
  return out;
}

Result<uint64_t> ObjectReader::unsigned_int(uint64_t object) {
  if (w_.type_name(object) != "int") return make_error(fmt::format("{:#x} is not an int", object));
  auto head = w_.read(object, o_.long_digit, "int");
  if (!head) return make_error(head.error());
  // 3.12+: lv_tag holds the digit count from bit 3 and the sign in bits 0-1
  // (0 positive, 1 zero); 3.11: ob_size is the signed digit count.
  const uint64_t tag = load_u64(*head, o_.long_tag);
  uint64_t digits = 0;
  if (o_.long_tag_is_size) {
    const auto size = static_cast<int64_t>(tag);
    if (size < 0) return make_error("a negative int");
    digits = static_cast<uint64_t>(size);
  } else {
    if ((tag & 3) == 1) return uint64_t{0};
    if ((tag & 3) != 0) return make_error("a negative int");
    digits = tag >> 3;
  }
  if (digits > 3) return make_error("an int past 64 bits");
  if (digits == 0) return uint64_t{0};
  auto b = w_.read(object + o_.long_digit, digits * 4, "int digits");
  if (!b) return make_error(b.error());
  unsigned __int128 value = 0;  // 30-bit digits, least significant first
  for (uint64_t i = digits; i-- > 0;) value = (value << 30) | (load_u32(*b, 4 * i) & 0x3fffffffu);
  if (value >> 64) return make_error("an int past 64 bits");
  return static_cast<uint64_t>(value);
}

Result<uint64_t> ObjectReader::weakref_target(uint64_t ref) {
  auto target = w_.read_ptr(ref + o_.weakref_object, "weakref");
  if (!target) return make_error(target.error());
  // A dead reference points at None.
  if (!plausible_pointer(*target) || w_.type_name(*target) == "NoneType") return uint64_t{0};
  return *target;
}

Result<uint64_t> ObjectReader::module_dict(uint64_t interp, std::string_view name) {
  if (!o_.interp_modules) return make_error("sys.modules is not known for this version");
  auto modules = w_.read_ptr(interp + o_.interp_modules, "sys.modules");
  if (!modules) return make_error(modules.error());
  if (*modules == 0) return uint64_t{0};
  auto module = dict_get(*modules, name);
  if (!module || *module == 0) return module;
  if (!is_instance(*module, "module")) return uint64_t{0};  // sys.modules may hold anything
  return w_.read_ptr(*module + o_.module_dict, "module __dict__");
}

}  // namespace hangtrace::python
