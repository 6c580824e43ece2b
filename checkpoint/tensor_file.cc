#include "checkpoint/tensor_file.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include "common/direct_file.h"

namespace mitra::checkpoint {

Result<DType> ToDType(c10::ScalarType type) {
  switch (type) {
    case torch::kFloat32: return DType::kFloat32;
    case torch::kFloat64: return DType::kFloat64;
    case torch::kFloat16: return DType::kFloat16;
    case torch::kBFloat16: return DType::kBFloat16;
    case torch::kInt64: return DType::kInt64;
    case torch::kInt32: return DType::kInt32;
    case torch::kUInt8: return DType::kUInt8;
    case torch::kBool: return DType::kBool;
    default:
      return Status::InvalidArgument(std::string("tensors of type ") + c10::toString(type) +
                                     " cannot be checkpointed");
  }
}

c10::ScalarType ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return torch::kFloat32;
    case DType::kFloat64: return torch::kFloat64;
    case DType::kFloat16: return torch::kFloat16;
    case DType::kBFloat16: return torch::kBFloat16;
    case DType::kInt64: return torch::kInt64;
    case DType::kInt32: return torch::kInt32;
    case DType::kUInt8: return torch::kUInt8;
    case DType::kBool: return torch::kBool;
  }
  return torch::kFloat32;
}

Status AddTensor(TorchZipWriter& writer, const std::string& name, const torch::Tensor& tensor) {
  Result<DType> dtype = ToDType(tensor.scalar_type());
  if (!dtype.ok()) return Status::InvalidArgument(name + ": " + dtype.status().message());
  const torch::Tensor t = tensor.is_contiguous() ? tensor : tensor.contiguous();
  return writer.Add(name, *dtype, t.sizes().vec(), t.data_ptr());
}

torch::Tensor EmptyAligned(c10::IntArrayRef sizes, c10::ScalarType type) {
  int64_t numel = 1;
  for (int64_t d : sizes) numel *= d;
  constexpr size_t kAlign = DirectFile::kAlignment;
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(type);
  void* data = std::aligned_alloc(kAlign, std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
  if (!data) throw std::bad_alloc();
  return torch::from_blob(data, sizes, [](void* p) { std::free(p); },
                          torch::TensorOptions().dtype(type));
}

torch::Tensor EmptyFor(const TensorRecord& record) {
  return torch::empty(record.shape, torch::TensorOptions().dtype(ToScalarType(record.dtype)));
}

}  // namespace mitra::checkpoint
