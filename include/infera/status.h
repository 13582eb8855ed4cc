// Status and StatusOr<T>: the error type that crosses every module boundary.
// No exception leaves a module; functions that can fail return one of these.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace infera {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad user input (CLI flag, request field)
  kNotFound,          // missing file, key, tensor or model
  kDataLoss,          // malformed or truncated file
  kUnimplemented,     // valid but unsupported (dtype, architecture)
  kResourceExhausted, // out of memory, KV blocks, queue slots
  kOutOfRange,        // prompt longer than the context, index past the end
  kInternal,          // a bug: an invariant did not hold
  kCancelled,
  kUnavailable,       // shutting down or not ready
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message"
  std::string ToString() const;
  // Returns a copy whose message is "prefix: message".
  Status WithPrefix(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT
  StatusOr(T value) : value_(std::move(value)) {}                                  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace infera

#define INFERA_CONCAT_INNER(a, b) a##b
#define INFERA_CONCAT(a, b) INFERA_CONCAT_INNER(a, b)

// Returns early from the enclosing function when `expr` is not OK.
#define RETURN_IF_ERROR(expr)                     \
  do {                                            \
    ::infera::Status _st = (expr);                \
    if (!_st.ok()) return _st;                    \
  } while (0)

// ASSIGN_OR_RETURN(auto x, MakeX()); moves the value out or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(INFERA_CONCAT(_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
