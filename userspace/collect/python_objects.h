// Reading CPython's containers and attributes from outside (3.11+): the
// value of a dict's str key, an object's instance attribute (its __dict__,
// or the values 3.11+ keep beside or inside the object), the members of a
// set, the items of a list or tuple, an int's value, what a weakref refers
// to, and whether an object is an instance of a type named so. What the
// asyncio task registries of 3.11-3.13 are read with
// (python_asyncio_registry.cpp). Every container read is bounded and every
// pointer checked: the target's bytes are never trusted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hangtrace/result.h"
#include "python_walker.h"

namespace hangtrace::python {

constexpr size_t kMaxDictEntries = 1 << 16;  // sys.modules of a big job holds a few thousand
constexpr uint64_t kMaxSetSlots = 1 << 16;
constexpr size_t kMaxSequenceItems = 1 << 16;

class ObjectReader {
 public:
  explicit ObjectReader(Walker& walker) : w_(walker), o_(walker.offsets()) {}

  Walker& walker() { return w_; }

  // The value of str key `key` in dict `dict`; 0 when it has no such key.
  Result<uint64_t> dict_get(uint64_t dict, std::string_view key);

  // Each (key, value) of dict `dict`, in insertion order, at most `limit`.
  Result<std::vector<std::pair<uint64_t, uint64_t>>> dict_items(uint64_t dict, size_t limit);

  // Instance attribute `name` of `object` (what its __dict__ holds, not
  // class attributes or slots); 0 when it has none.
  Result<uint64_t> attribute(uint64_t object, std::string_view name);

  // The members of set `set` (empty and deleted slots skipped), at most `limit`.
  Result<std::vector<uint64_t>> set_members(uint64_t set, size_t limit);

  // The items of a list or tuple, at most `limit`.
  Result<std::vector<uint64_t>> sequence_items(uint64_t sequence, size_t limit);

  // A non-negative int that fits 64 bits.
  Result<uint64_t> unsigned_int(uint64_t object);

  // The object weakref `ref` refers to; 0 when it is dead.
  Result<uint64_t> weakref_target(uint64_t ref);

  // Whether the type of `object`, or one of its bases, has tp_name `type_name`.
  bool is_instance(uint64_t object, std::string_view type_name);

  // sys.modules[name].__dict__ of interpreter state `interp`; 0 when the
  // module is not imported.
  Result<uint64_t> module_dict(uint64_t interp, std::string_view name);

 private:
  struct TypeInfo {
    uint64_t flags = 0;
    int64_t basicsize = 0, dictoffset = 0;
    uint64_t cached_keys = 0;  // a heap type's shared keys of its instances' dicts
    uint64_t base = 0;
    std::string name;
  };
  const TypeInfo* type_of(uint64_t object);
  const TypeInfo* type_info(uint64_t type);
  // The entries of keys object `keys`: (key, value) pairs, the values from
  // `values` (a split dict's array, 0 for a combined table).
  Result<std::vector<std::pair<uint64_t, uint64_t>>> entries(uint64_t keys, uint64_t values, size_t limit);
  Result<uint64_t> lookup(uint64_t keys, uint64_t values, std::string_view key);
  bool key_equals(uint64_t str, std::string_view key);

  Walker& w_;
  const PyOffsets& o_;
  std::unordered_map<uint64_t, TypeInfo> types_;
};

}  // namespace hangtrace::python
