#include "mitra/planner/batch_split.h"

#include <algorithm>
#include <cassert>
#include <numeric>

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

BatchShare ShareOf(int64_t global_batch, int64_t chunk_size, const Shares& shares, int replicas,
                   int replica) {
  if (shares.empty()) return ShareOf(global_batch, chunk_size, replicas, replica);
  assert(replica >= 0 && replica < static_cast<int>(shares.size()));
  BatchShare share;
  share.first_micro_batch = std::accumulate(shares.begin(), shares.begin() + replica, int64_t{0});
  share.micro_batches = shares[replica];
  share.offset = share.first_micro_batch * chunk_size;
  share.samples =
      std::min(global_batch, (share.first_micro_batch + share.micro_batches) * chunk_size) -
      share.offset;
  return share;
}

Shares EvenShares(int64_t micro_batches, int replicas) {
  assert(replicas >= 1 && replicas <= micro_batches);
  Shares out(replicas, micro_batches / replicas);
  for (int64_t d = 0; d < micro_batches % replicas; ++d) ++out[d];
  return out;
}

Shares SharesBySpeed(int64_t micro_batches, const std::vector<double>& speeds, int64_t granule) {
  const int64_t replicas = static_cast<int64_t>(speeds.size());
  if (replicas < 1 || granule < 1 || micro_batches % granule != 0 ||
      micro_batches / granule < replicas) {
    return {};
  }
  // In granules: one each, then the rest in proportion to the speeds, by largest remainder.
  const int64_t units = micro_batches / granule, spare = units - replicas;
  const double total = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  Shares out(replicas, 1);
  std::vector<double> remainder(replicas);
  int64_t given = 0;
  for (int64_t d = 0; d < replicas; ++d) {
    assert(speeds[d] > 0);
    const double exact = static_cast<double>(units) * speeds[d] / total - 1;
    const int64_t whole = std::clamp<int64_t>(static_cast<int64_t>(exact), 0, spare - given);
    out[d] += whole;
    given += whole;
    remainder[d] = exact - static_cast<double>(whole);
  }
  std::vector<int64_t> order(replicas);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return remainder[a] > remainder[b]; });
  for (int64_t i = 0; given < spare; i = (i + 1) % replicas, ++given) ++out[order[i]];
  for (int64_t& share : out) share *= granule;
  return out;
}

Status CheckShares(const Shares& shares, int64_t micro_batches, int replicas) {
  if (shares.empty()) return Status::Ok();
  if (static_cast<int>(shares.size()) != replicas) {
    return Status::InvalidArgument("shares " + SharesText(shares) + " name " +
                                   std::to_string(shares.size()) + " replicas, the job has " +
                                   std::to_string(replicas) + ": give one count per replica");
  }
  const int64_t sum = std::accumulate(shares.begin(), shares.end(), int64_t{0});
  if (*std::min_element(shares.begin(), shares.end()) < 1 || sum != micro_batches) {
    return Status::InvalidArgument(
        "shares " + SharesText(shares) + " must give each replica 1 or more micro-batches, " +
        std::to_string(micro_batches) + " in all (the step's micro-batches); they give " +
        std::to_string(sum));
  }
  return Status::Ok();
}

std::string SharesText(const Shares& shares) {
  std::string out;
  for (size_t d = 0; d < shares.size(); ++d) {
    if (d > 0) out += ',';
    out += std::to_string(shares[d]);
  }
  return out;
}

bool Uneven(const Shares& shares) {
  if (shares.empty()) return false;
  const int64_t sum = std::accumulate(shares.begin(), shares.end(), int64_t{0});
  return static_cast<int64_t>(shares.size()) > sum ||
         shares != EvenShares(sum, static_cast<int>(shares.size()));
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
