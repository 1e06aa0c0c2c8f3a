// Result<T>: the must-check return type of every fallible call in nodegate.
// Exceptions from libraries are caught at the seam that wraps them and turned into an Error
// carrying errno (0 when there is none) and a lowercase "failed to <verb> <object>: <cause>".
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace nodegate {

struct Error {
  int code = 0;         // errno where one applies, else 0
  std::string message;  // "failed to open /dev/kvm: Permission denied"
};

// Builds "failed to <what>: strerror(err)" with the errno kept for callers that branch on it.
Error errnoError(int err, std::string what);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit on purpose
  Result(Error error) : v_(std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return std::get<0>(v_); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  // Non-const access too, so that std::move(*r) and std::move(r->field) move instead of
  // silently copying (clang-tidy's performance-move-const-arg found six such copies).
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }
  const Error& error() const { return std::get<1>(v_); }
  T valueOr(T fallback) const { return ok() ? value() : std::move(fallback); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace nodegate
