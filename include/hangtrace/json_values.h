// Values of the JSON files hangtrace writes and reads back. Read: a file
// someone else may have written (a snapshot, a bundle's meta.json, an
// archive fetched from another host's daemon) gives a value only where it
// fits; nlohmann casts a float to an integer type unchecked (undefined
// behaviour out of range: UBSan, the bundle fuzzer). Written: an unset
// optional is null.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <limits>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace hangtrace::json_values {

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

// `v` as a T: a float only where it fits the integer it stands for; an
// out-of-range one throws std::out_of_range, a wrong type nlohmann's
// type_error (both caught by the loaders, one clear error).
template <class T>
T as(const nlohmann::json& v) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!(d >= static_cast<double>(std::numeric_limits<T>::min()) &&
            d < static_cast<double>(std::numeric_limits<T>::max()) + 1.0))
        throw std::out_of_range(fmt::format("{} does not fit the integer it stands for", d));
      return static_cast<T>(d);
    }
    return v.get<T>();
  } else if constexpr (is_vector<T>::value) {
    if (!v.is_array()) return v.get<T>();  // nlohmann's type error
    T out;
    for (const auto& e : v) out.push_back(as<typename T::value_type>(e));
    return out;
  } else {
    return v.get<T>();
  }
}

// Reads `key` of `j` into `out` where it is present and not null; `out`
// keeps its value otherwise.
template <class T>
void get_if(const nlohmann::json& j, const char* key, T& out) {
  if (j.contains(key) && !j.at(key).is_null()) out = as<T>(j.at(key));
}
template <class T>
void get_opt(const nlohmann::json& j, const char* key, std::optional<T>& out) {
  if (j.contains(key) && !j.at(key).is_null()) out = as<T>(j.at(key));
}

// `v`, or null when unset.
template <class T>
nlohmann::json nullable(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace hangtrace::json_values
