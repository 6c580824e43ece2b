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

std::string EncodeTensors(const TensorMap& tensors);
// `where` names the file in the error.
Result<TensorMap> DecodeTensors(const std::string& bytes, const std::string& where);

}  // namespace mitra::checkpoint
