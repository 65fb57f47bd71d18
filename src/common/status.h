// Status: an error code plus a message, passed by value across threads.
// Internals return Status instead of throwing; the C ABI layer maps it to
// mgs_status_t and a thread-local message.
#pragma once

#include <string>
#include <utility>

#include "mgs/mgs.h"

namespace mgs {

enum class Code : int {
  kOk = MGS_SUCCESS,
  kInvalidArgument = MGS_ERR_INVALID_ARGUMENT,
  kNotInitialized = MGS_ERR_NOT_INITIALIZED,
  kAlreadyInitialized = MGS_ERR_ALREADY_INITIALIZED,
  kDuplicateName = MGS_ERR_DUPLICATE_NAME,
  kMismatch = MGS_ERR_MISMATCH,
  kConfig = MGS_ERR_CONFIG,
  kCommunication = MGS_ERR_COMMUNICATION,
  kCuda = MGS_ERR_CUDA,
  kTimeout = MGS_ERR_TIMEOUT,
  kShutdown = MGS_ERR_SHUTDOWN,
  kUnsupported = MGS_ERR_UNSUPPORTED,
  kNumeric = MGS_ERR_NUMERIC,
  kInternal = MGS_ERR_INTERNAL,
  kInProgress = MGS_ERR_IN_PROGRESS,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "MGS_ERR_MISMATCH: <message>"
  std::string toString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

const char* codeName(Code code);

}  // namespace mgs
