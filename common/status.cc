#include "mitra/common/status.h"

namespace mitra {

std::string Status::ToString() const {
  switch (code_) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "invalid argument: " + message_;
    case Code::kNotFound: return "not found: " + message_;
    case Code::kUnavailable: return "unavailable: " + message_;
    case Code::kTimeout: return "timed out: " + message_;
    case Code::kIoError: return "I/O error: " + message_;
    case Code::kAborted: return "aborted: " + message_;
    case Code::kInternal: return "internal error: " + message_;
  }
  return message_;
}

}  // namespace mitra
