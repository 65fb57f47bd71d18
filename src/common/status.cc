#include "common/status.h"

namespace mgs {

const char* codeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "MGS_SUCCESS";
    case Code::kInvalidArgument:
      return "MGS_ERR_INVALID_ARGUMENT";
    case Code::kNotInitialized:
      return "MGS_ERR_NOT_INITIALIZED";
    case Code::kAlreadyInitialized:
      return "MGS_ERR_ALREADY_INITIALIZED";
    case Code::kDuplicateName:
      return "MGS_ERR_DUPLICATE_NAME";
    case Code::kMismatch:
      return "MGS_ERR_MISMATCH";
    case Code::kConfig:
      return "MGS_ERR_CONFIG";
    case Code::kCommunication:
      return "MGS_ERR_COMMUNICATION";
    case Code::kCuda:
      return "MGS_ERR_CUDA";
    case Code::kTimeout:
      return "MGS_ERR_TIMEOUT";
    case Code::kShutdown:
      return "MGS_ERR_SHUTDOWN";
    case Code::kUnsupported:
      return "MGS_ERR_UNSUPPORTED";
    case Code::kNumeric:
      return "MGS_ERR_NUMERIC";
    case Code::kInternal:
      return "MGS_ERR_INTERNAL";
    case Code::kInProgress:
      return "MGS_ERR_IN_PROGRESS";
  }
  return "MGS_ERR_UNKNOWN";
}

std::string Status::toString() const {
  if (ok()) return "MGS_SUCCESS";
  return std::string(codeName(code_)) + ": " + message_;
}

}  // namespace mgs
