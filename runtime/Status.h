//===- Status.h - errors the runtime returns ----------------------*- C++ -*-===//
//
// The runtime reports failures as values that say what failed and where
// ("fashion-mnist: /path/train-images-idx3-ubyte.gz: not found"), as XLA's
// thunks do; it never aborts on bad input.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_STATUS_H
#define KILN_RUNTIME_STATUS_H

#include <optional>
#include <string>
#include <utility>

namespace kiln::runtime {

class Status {
public:
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.message_ = std::move(message);
    s.ok_ = false;
    return s;
  }
  bool isOk() const { return ok_; }
  const std::string &message() const { return message_; }

private:
  bool ok_ = true;
  std::string message_;
};

template <typename T>
class StatusOr {
public:
  StatusOr(T value) : value_(std::move(value)) {}
  StatusOr(Status status) : status_(std::move(status)) {}
  bool isOk() const { return value_.has_value(); }
  const Status &status() const { return status_; }
  T &value() { return *value_; }
  const T &value() const { return *value_; }
  T *operator->() { return &*value_; }
  const T *operator->() const { return &*value_; }

private:
  std::optional<T> value_;
  Status status_;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_STATUS_H
