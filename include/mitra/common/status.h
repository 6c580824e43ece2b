// Status and Result<T>: expected failures as values.
//
// A Status is either OK or carries a Code that tells the caller how to react, plus a message
// written for the user (it names the thing and the fix). Result<T> holds a T or a non-OK Status.
// Both are cheap to move and safe to copy; neither is thread-safe to mutate concurrently.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace mitra {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,  // the user's input is wrong: fix it and retry (exit code 2)
    kNotFound,         // a file, host or checkpoint does not exist
    kUnavailable,      // a peer or host cannot be reached now; retrying may help
    kTimeout,          // a blocking wait ran past its deadline
    kIoError,          // the OS refused a read or write
    kAborted,          // stopped on request (signal, stop command)
    kInternal,         // a bug in mitra
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
  static Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
  static Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
  static Status Timeout(std::string m) { return Status(Code::kTimeout, std::move(m)); }
  static Status IoError(std::string m) { return Status(Code::kIoError, std::move(m)); }
  static Status Aborted(std::string m) { return Status(Code::kAborted, std::move(m)); }
  static Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

// Result<T>: a value or the Status that explains why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "Result needs a value or an error");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace mitra
