// A byte-level GPT as a CutPoint model: embedding, N transformer blocks and the output head,
// each its own segment (CutPoints between the blocks), the token embedding tied with the
// output projection.
#pragma once

#include <string>

#include "mitra/common/status.h"
#include "mitra/cutpoint/model.h"

namespace mitra::examples {

struct GptConfig {
  int64_t vocab = 256;
  int64_t context = 128;
  int64_t width = 128;
  int64_t heads = 4;
  int64_t layers = 8;
  int64_t mlp_width = 512;
  double dropout = 0;  // after the attention and the MLP of every block, in training

  // "bench": fixed so others can reproduce it (see the README). "tiny": for tests. "large":
  // the bench model at width 1024 (16 heads, MLP 4096), ~101 M parameters.
  static Result<GptConfig> Named(const std::string& name);
};

// Segments "embed", "block0" .. "block<N-1>", "head". Batches hold int64 "tokens" and
// "targets" of shape [batch, context]. The loss is the per-sample mean cross-entropy, summed.
// Every sample is computed on its own (LayerNorm, no BatchNorm): the model declares itself
// micro-batch independent.
cutpoint::ModelSpec MakeGptSpec(const GptConfig& config);

}  // namespace mitra::examples
