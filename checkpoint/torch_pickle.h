// The data.pkl of a PyTorch zip file: the pickle that names each tensor and points at its
// storage record (docs/checkpoint-format.md). Only what a dict of tensors needs is written.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/torch_zip.h"

namespace mitra::checkpoint::detail {

// A protocol-2 pickle of a dict from each tensor's name to
//   torch._utils._rebuild_tensor_v2(<storage 'keys[i]'>, 0, shape, contiguous strides, False,
//                                   collections.OrderedDict())
// where the storage is the persistent id ('storage', torch.<Type>Storage, keys[i], 'cpu',
// numel). With `nest_separator` != 0, names are split into paths of nested dicts.
std::string PickleTensorDict(const std::vector<TensorRecord>& tensors,
                             const std::vector<std::string>& keys, char nest_separator);

}  // namespace mitra::checkpoint::detail
