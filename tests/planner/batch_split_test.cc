#include "mitra/planner/batch_split.h"

#include <gtest/gtest.h>

namespace mitra::planner {
namespace {

TEST(BatchSplit, MicroBatchesAreCutFromTheGlobalBatchWhateverTheReplicas) {
  // 30 samples in micro-batches of 4: 8 micro-batches, the last of 2 samples.
  EXPECT_EQ(NumMicroBatches(30, 4), 8);
  EXPECT_EQ(MicroBatchSamples(30, 4, 7).begin, 28);
  EXPECT_EQ(MicroBatchSamples(30, 4, 7).end, 30);
  for (int replicas = 1; replicas <= 8; ++replicas) {
    int64_t next_micro_batch = 0, next_sample = 0;
    for (int d = 0; d < replicas; ++d) {
      const BatchShare share = ShareOf(30, 4, replicas, d);
      EXPECT_EQ(share.first_micro_batch, next_micro_batch) << replicas << " replicas";
      EXPECT_EQ(share.offset, next_sample);
      EXPECT_GE(share.micro_batches, 1);
      // A replica's samples are exactly those of its micro-batches.
      EXPECT_EQ(share.samples,
                MicroBatchSamples(30, 4, share.first_micro_batch + share.micro_batches - 1).end -
                    share.offset);
      next_micro_batch += share.micro_batches;
      next_sample += share.samples;
    }
    EXPECT_EQ(next_micro_batch, 8);
    EXPECT_EQ(next_sample, 30);
  }
}

TEST(BatchSplit, FirstReplicasTakeTheRemainingMicroBatches) {
  EXPECT_EQ(ShareOf(16, 4, 3, 0).micro_batches, 2);  // 4 micro-batches: 2, 1, 1
  EXPECT_EQ(ShareOf(16, 4, 3, 0).samples, 8);
  EXPECT_EQ(ShareOf(16, 4, 3, 1).micro_batches, 1);
  EXPECT_EQ(ShareOf(16, 4, 3, 2).offset, 12);
}

TEST(BatchSplit, ChunkSizeForGivesEvenSharesAndEnoughMicroBatches) {
  EXPECT_EQ(ChunkSizeFor(32, 3, 1), 11);  // 11, 11, 10
  EXPECT_EQ(ChunkSizeFor(32, 1, 1), 32);
  EXPECT_EQ(ChunkSizeFor(32, 2, 8), 2);   // 2 stages: 4 P = 8 micro-batches per replica
  EXPECT_EQ(ChunkSizeFor(10, 6, 1), 1);   // rounding up (2) would make 5 < 6 micro-batches
  for (int64_t batch : {1, 7, 32, 100}) {
    for (int replicas = 1; replicas <= batch && replicas <= 12; ++replicas) {
      for (int64_t per : {1, 4, 8}) {
        EXPECT_GE(NumMicroBatches(batch, ChunkSizeFor(batch, replicas, per)), replicas)
            << batch << " " << replicas << " " << per;
      }
    }
  }
}

}  // namespace
}  // namespace mitra::planner
