// Recoverable errors travel in return values: Result<T> holds a value or a
// message of the form "failed to X: <reason>".
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace hangtrace {

struct Error {
  std::string message;
};

template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}              // NOLINT: implicit by design
  Result(Error error) : error_(std::move(error.message)) {}  // NOLINT
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  const std::string& error() const { return error_; }

 private:
  std::optional<T> value_;
  std::string error_;
};

inline Error make_error(std::string message) { return Error{std::move(message)}; }

}  // namespace hangtrace
