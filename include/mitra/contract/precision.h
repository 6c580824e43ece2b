// The numeric precision and the device of a worker's stage, as the worker contract names them
// (MITRA_PRECISION, MITRA_DEVICE; `mitra run --precision`, a program's --precision and
// --device). Spelled once here, without LibTorch, so the manager refuses a bad value before
// any worker starts and the worker refuses exactly the same values. What a build
// can do with them (fp16 and cuda need a GPU) is the worker's question (worker/step/precision.h).
#pragma once

#include <string>

#include "mitra/common/status.h"

namespace mitra::contract {

enum class Precision { kFp32, kBf16, kFp16 };
enum class DeviceKind { kCpu, kCuda };

// "fp32" | "bf16" | "fp16"; else InvalidArgument "unknown precision 'fp8' (expected fp32, bf16
// or fp16)".
Result<Precision> ParsePrecision(const std::string& name);
const char* PrecisionName(Precision precision);

// "cpu" | "cuda"; else InvalidArgument naming the two.
Result<DeviceKind> ParseDeviceKind(const std::string& name);
const char* DeviceKindName(DeviceKind device);

// The same checks for a value read from `what` (a flag or variable), in the words the manager
// prints: "MITRA_PRECISION 'fp8' is not a precision: use fp32 (the default), bf16 or fp16".
Status CheckPrecision(const std::string& value, const std::string& what);
Status CheckDevice(const std::string& value, const std::string& what);

}  // namespace mitra::contract
