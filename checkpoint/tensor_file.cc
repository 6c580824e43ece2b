#include "checkpoint/tensor_file.h"

#include <torch/serialize.h>

namespace mitra::checkpoint {

std::string EncodeTensors(const TensorMap& tensors) {
  c10::Dict<std::string, torch::Tensor> dict;
  for (const auto& [name, t] : tensors) dict.insert(name, t);
  const std::vector<char> bytes = torch::pickle_save(dict);
  return std::string(bytes.begin(), bytes.end());
}

Result<TensorMap> DecodeTensors(const std::string& bytes, const std::string& where) {
  try {
    TensorMap out;
    std::vector<char> data(bytes.begin(), bytes.end());
    for (const auto& item : torch::pickle_load(data).toGenericDict()) {
      out[item.key().toStringRef()] = item.value().toTensor();
    }
    return out;
  } catch (const std::exception& e) {
    std::string why = e.what();
    return Status::IoError(where + " is not a tensor dict: " + why.substr(0, why.find('\n')));
  }
}

}  // namespace mitra::checkpoint
