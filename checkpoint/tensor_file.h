// LibTorch tensors in and out of tensor files (checkpoint/torch_zip.h): the dtype mapping, and
// writing a tensor straight from its memory.
#pragma once

#include <string>

#include <torch/types.h>

#include "checkpoint/torch_zip.h"
#include "mitra/common/status.h"

namespace mitra::checkpoint {

// InvalidArgument for a dtype the format does not carry (complex, quantized, ...).
Result<DType> ToDType(c10::ScalarType type);
c10::ScalarType ToScalarType(DType dtype);

// Adds `tensor` (CPU; copied first only when not contiguous) to `writer` under `name`.
Status AddTensor(TorchZipWriter& writer, const std::string& name, const torch::Tensor& tensor);

// An uninitialised CPU tensor of the record's dtype and shape, to read the record into.
torch::Tensor EmptyFor(const TensorRecord& record);

// An uninitialised contiguous CPU tensor whose data starts at a DirectFile::kAlignment
// boundary, so that a TorchZipWriter writes it to the disk straight from its memory.
torch::Tensor EmptyAligned(c10::IntArrayRef sizes, c10::ScalarType type);

}  // namespace mitra::checkpoint
