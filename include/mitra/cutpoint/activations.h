// Activations: the named tensors that flow between segments (and across stage boundaries).
//
// A segment receives the Activations its predecessor produced and returns its own. Names are
// the contract between neighbouring segments ("hidden", "mask", ...); a segment passes through
// whatever a later segment still needs (skip tensors travel this way). The map is ordered, so
// every rank iterates the same tensors in the same order when sending and receiving them.
#pragma once

#include <map>
#include <string>

#include <torch/types.h>

namespace mitra::cutpoint {

using Activations = std::map<std::string, torch::Tensor>;

// Samples in a batch: the size of the first dimension of any tensor (all agree).
int64_t BatchSizeOf(const Activations& batch);

// Rows [begin, end) of every tensor: a micro-batch cut out of a batch (views, no copies).
Activations SliceRows(const Activations& batch, int64_t begin, int64_t end);

}  // namespace mitra::cutpoint
