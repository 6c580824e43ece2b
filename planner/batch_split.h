// How one step's global batch is cut into micro-batches and shared among the replicas.
//
// The B samples of a step are cut, in their global order, into M = ceil(B / c) micro-batches of
// the chunk size c: micro-batch j holds samples [j c, min((j + 1) c, B)), so only the last one
// may be smaller. The micro-batches go to the D replicas in contiguous runs, in replica order,
// the first M mod D replicas taking one more. Which samples form a micro-batch therefore never
// depends on the shape: a layer whose output depends on the other samples of its micro-batch
// (BatchNorm) computes the same in every P x D, and a micro-batch has one global index that
// seeds its random numbers. A shape needs D <= M, so that every replica gets a micro-batch.
//
// Pure functions, shared by the manager (which plans D) and the workers (which cut batches).
#pragma once

#include <cstdint>

namespace mitra::planner {

// M = ceil(global_batch / chunk_size); both must be >= 1.
int64_t NumMicroBatches(int64_t global_batch, int64_t chunk_size);

// One replica's part of a step: micro-batches [first_micro_batch, first_micro_batch +
// micro_batches) of the step, which are samples [offset, offset + samples) of its batch.
struct BatchShare {
  int64_t first_micro_batch = 0;
  int64_t micro_batches = 0;
  int64_t offset = 0;
  int64_t samples = 0;
};

// Replica `replica` of `replicas`; replicas must not exceed NumMicroBatches.
BatchShare ShareOf(int64_t global_batch, int64_t chunk_size, int replicas, int replica);

// Samples [begin, end) of the step's batch that micro-batch `micro_batch` holds.
struct SampleRange {
  int64_t begin = 0;
  int64_t end = 0;
};
SampleRange MicroBatchSamples(int64_t global_batch, int64_t chunk_size, int64_t micro_batch);

// A micro-batch size that gives each of `replicas` replicas about `per_replica` micro-batches,
// never fewer micro-batches than replicas, and shares as even as those allow.
int64_t ChunkSizeFor(int64_t global_batch, int replicas, int64_t per_replica);

// The replica of a stage (whose segments start at `first_segment`) that owns `segment`: it
// writes the segment's checkpoint file and, under ZeRO-1, keeps and updates its optimizer
// state. The stage's segments alternate among its `replicas`.
inline int ReplicaOwningSegment(int segment, int first_segment, int replicas) {
  return (segment - first_segment) % replicas;
}

}  // namespace mitra::planner
