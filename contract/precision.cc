#include "contract/precision.h"

namespace mitra::contract {

Status CheckPrecision(const std::string& value, const std::string& what) {
  if (value == "fp32" || value == "bf16" || value == "fp16") return Status::Ok();
  return Status::InvalidArgument(what + " '" + value +
                                 "' is not a precision: use fp32 (the default), bf16 or fp16");
}

Status CheckDevice(const std::string& value, const std::string& what) {
  if (value == "cpu" || value == "cuda") return Status::Ok();
  return Status::InvalidArgument(what + " '" + value +
                                 "' is not a device: use cpu (the default) or cuda");
}

}  // namespace mitra::contract
