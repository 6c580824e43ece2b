#include "mitra/planner/batch_split.h"

#include <algorithm>
#include <cassert>

namespace mitra::planner {

int64_t NumMicroBatches(int64_t global_batch, int64_t chunk_size) {
  assert(global_batch >= 1 && chunk_size >= 1);
  return (global_batch + chunk_size - 1) / chunk_size;
}

BatchShare ShareOf(int64_t global_batch, int64_t chunk_size, int replicas, int replica) {
  const int64_t m = NumMicroBatches(global_batch, chunk_size);
  assert(replicas >= 1 && replicas <= m && replica >= 0 && replica < replicas);
  const int64_t base = m / replicas, extra = m % replicas;
  BatchShare share;
  share.first_micro_batch = replica * base + std::min<int64_t>(replica, extra);
  share.micro_batches = base + (replica < extra ? 1 : 0);
  share.offset = share.first_micro_batch * chunk_size;
  share.samples =
      std::min(global_batch, (share.first_micro_batch + share.micro_batches) * chunk_size) -
      share.offset;
  return share;
}

SampleRange MicroBatchSamples(int64_t global_batch, int64_t chunk_size, int64_t micro_batch) {
  return {micro_batch * chunk_size, std::min(global_batch, (micro_batch + 1) * chunk_size)};
}

int64_t ChunkSizeFor(int64_t global_batch, int replicas, int64_t per_replica) {
  const int64_t wanted = std::max<int64_t>(1, int64_t{replicas} * std::max<int64_t>(1, per_replica));
  // Rounding the chunk up keeps the micro-batches even (32 samples for 3 replicas: 11, 11, 10);
  // when that leaves fewer micro-batches than replicas, round down instead.
  int64_t chunk = std::max<int64_t>(1, (global_batch + wanted - 1) / wanted);
  if (NumMicroBatches(global_batch, chunk) < replicas) {
    chunk = std::max<int64_t>(1, global_batch / wanted);
  }
  return chunk;
}

}  // namespace mitra::planner
