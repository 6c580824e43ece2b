#include "mitra/contract/precision.h"

namespace mitra::contract {

Result<Precision> ParsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  return Status::InvalidArgument("unknown precision '" + name + "' (expected fp32, bf16 or fp16)");
}

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

Result<DeviceKind> ParseDeviceKind(const std::string& name) {
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  return Status::InvalidArgument("unknown device '" + name + "' (expected cpu or cuda)");
}

const char* DeviceKindName(DeviceKind device) {
  switch (device) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
  }
  return "?";
}

Status CheckPrecision(const std::string& value, const std::string& what) {
  if (ParsePrecision(value).ok()) return Status::Ok();
  return Status::InvalidArgument(what + " '" + value +
                                 "' is not a precision: use fp32 (the default), bf16 or fp16");
}

Status CheckDevice(const std::string& value, const std::string& what) {
  if (ParseDeviceKind(value).ok()) return Status::Ok();
  return Status::InvalidArgument(what + " '" + value +
                                 "' is not a device: use cpu (the default) or cuda");
}

}  // namespace mitra::contract
