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
// Replicas on machines of different speeds may take uneven shares (Shares): replica d takes the
// next shares[d] micro-batches. The micro-batches, and so the step's update (a sum over samples
// divided by B), are the same whatever the shares; only who computes which changes.
//
// Pure functions, shared by the manager (which plans D) and the workers (which cut batches).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mitra/common/status.h"

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

// Replica `replica` of `replicas` under even shares; replicas must not exceed NumMicroBatches.
BatchShare ShareOf(int64_t global_batch, int64_t chunk_size, int replicas, int replica);

// How many micro-batches each replica takes, in replica order: each >= 1, together M. Empty:
// even shares (the first M mod D replicas take one more).
using Shares = std::vector<int64_t>;

// Replica `replica` of shares.size() replicas (of `replicas`, when `shares` is empty); `shares`
// must have passed CheckShares.
BatchShare ShareOf(int64_t global_batch, int64_t chunk_size, const Shares& shares, int replicas,
                   int replica);

// The even shares of `micro_batches` among `replicas` (<= micro_batches).
Shares EvenShares(int64_t micro_batches, int replicas);

// Shares proportional to `speeds` (each > 0; one per replica, at most `micro_batches` of them):
// every replica at least `granule` micro-batches and a multiple of it (interleaved needs a
// multiple of P), the rest by largest remainder, ties to the lower replica. Empty when
// `micro_batches` is not a multiple of `granule` or too few to give each replica one granule.
Shares SharesBySpeed(int64_t micro_batches, const std::vector<double>& speeds, int64_t granule = 1);

// Ok, or InvalidArgument naming what is wrong: `shares` (non-empty) must have `replicas` counts,
// each >= 1, adding up to the step's `micro_batches`.
Status CheckShares(const Shares& shares, int64_t micro_batches, int replicas);

// "5,3" for {5, 3}, as the terminal and `mitra plan` show them.
std::string SharesText(const Shares& shares);
// True when the shares are not what EvenShares gives (nor empty).
bool Uneven(const Shares& shares);

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
