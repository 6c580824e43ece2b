// Tensor files: a {name: tensor} dict in LibTorch's pickle format, which Python reads with
// torch.load(path). One per segment ("param/<name>", "exp_avg/<name>", ...) plus trainer.pt.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <torch/types.h>

#include "common/status.h"

namespace mitra::checkpoint {

using TensorMap = std::map<std::string, torch::Tensor>;

// The file's bytes (LibTorch's pickle_save builds them in one buffer; no further copy here).
std::vector<char> EncodeTensors(const TensorMap& tensors);
// `where` names the file in the error.
Result<TensorMap> DecodeTensors(const std::vector<char>& bytes, const std::string& where);

}  // namespace mitra::checkpoint
