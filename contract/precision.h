// The numeric precision and the device of a worker's stage, as the worker contract names them
// (MITRA_PRECISION, MITRA_DEVICE; `mitra run --precision`, a program's --precision and
// --device). Spelled once here, without LibTorch, so the manager refuses a bad value before
// any worker starts and the worker refuses the same values with the same words.
#pragma once

#include <string>

#include "mitra/common/status.h"

namespace mitra::contract {

// "fp32" | "bf16" | "fp16". An InvalidArgument otherwise, naming `what` (the flag or
// variable the value came from) and the choices.
Status CheckPrecision(const std::string& value, const std::string& what);

// "cpu" | "cuda". Whether this build can place a stage there is the worker's question
// (worker/precision.h); this only checks the word.
Status CheckDevice(const std::string& value, const std::string& what);

}  // namespace mitra::contract
