#include "checkpoint/tensor_file.h"

#include <torch/serialize.h>

namespace mitra::checkpoint {

std::vector<char> EncodeTensors(const TensorMap& tensors) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [name, t] : tensors) dict.insert(name, t);
  return torch::pickle_save(dict);
}

Result<TensorMap> DecodeTensors(const std::vector<char>& bytes, const std::string& where) {
  try {
    TensorMap out;
    for (const auto& item : torch::pickle_load(bytes).toGenericDict()) {
      out[item.key().toStringRef()] = item.value().toTensor();
    }
    return out;
  } catch (const std::exception& e) {
    std::string why = e.what();
    return Status::IoError(where + " is not a tensor dict: " + why.substr(0, why.find('\n')));
  }
}

}  // namespace mitra::checkpoint
