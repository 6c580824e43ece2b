#include "mitra/cutpoint/activations.h"

#include <c10/util/Exception.h>

namespace mitra::cutpoint {

int64_t BatchSizeOf(const Activations& batch) {
  TORCH_CHECK(!batch.empty(), "a batch holds at least one tensor");
  return batch.begin()->second.size(0);
}

Activations SliceRows(const Activations& batch, int64_t begin, int64_t end) {
  Activations out;
  for (const auto& [name, tensor] : batch) out.emplace(name, tensor.slice(0, begin, end));
  return out;
}

}  // namespace mitra::cutpoint
