// result<T>: a value or an error message, for everything at the edges
// (files, configs, requests). Handlers return these and never throw.
// status is result<void>. Errors are plain human-readable strings that name
// the exact problem (the key, the tensor, the file).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "common/check.h"

namespace troupe {

struct error {
  std::string message;
};

inline error make_error(std::string message) { return error{std::move(message)}; }

template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::move(value)) {}
  result(error e) : v_(std::move(e)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { TROUPE_CHECK(ok()); return std::get<0>(v_); }
  const T& value() const& { TROUPE_CHECK(ok()); return std::get<0>(v_); }
  T&& value() && { TROUPE_CHECK(ok()); return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const std::string& error_message() const { TROUPE_CHECK(!ok()); return std::get<1>(v_).message; }
  error take_error() && { TROUPE_CHECK(!ok()); return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, error> v_;
};

template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(error e) : e_(std::move(e)) {}
  bool ok() const { return !e_.has_value(); }
  explicit operator bool() const { return ok(); }
  const std::string& error_message() const { TROUPE_CHECK(!ok()); return e_->message; }
  error take_error() && { TROUPE_CHECK(!ok()); return std::move(*e_); }

 private:
  std::optional<error> e_;
};

using status = result<void>;

}  // namespace troupe
