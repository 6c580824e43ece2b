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

TEST(BatchSplit, UnevenSharesTakeTheSameMicroBatchesInReplicaOrder) {
  // 30 samples in micro-batches of 4 (8 micro-batches) as 5, 2, 1: the replicas' samples are
  // consecutive runs of whole micro-batches, together the batch once.
  const Shares shares = {5, 2, 1};
  ASSERT_TRUE(CheckShares(shares, 8, 3).ok());
  int64_t next_micro_batch = 0, next_sample = 0;
  for (int d = 0; d < 3; ++d) {
    const BatchShare share = ShareOf(30, 4, shares, 3, d);
    EXPECT_EQ(share.first_micro_batch, next_micro_batch);
    EXPECT_EQ(share.micro_batches, shares[d]);
    EXPECT_EQ(share.offset, next_sample);
    next_micro_batch += share.micro_batches;
    next_sample += share.samples;
  }
  EXPECT_EQ(next_micro_batch, 8);
  EXPECT_EQ(next_sample, 30);
  // No shares: the even split.
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(ShareOf(30, 4, Shares{}, 3, d).offset, ShareOf(30, 4, 3, d).offset);
    EXPECT_EQ(ShareOf(30, 4, EvenShares(8, 3), 3, d).samples, ShareOf(30, 4, 3, d).samples);
  }
}

TEST(BatchSplit, SharesFollowTheSpeedsInWholeGranules) {
  EXPECT_EQ(SharesBySpeed(8, {1.0, 1.0}), (Shares{4, 4}));
  EXPECT_EQ(SharesBySpeed(8, {1.0, 0.4, 0.4}), (Shares{4, 2, 2}));  // 4.44, 1.78, 1.78
  EXPECT_EQ(SharesBySpeed(16, {2.5, 1.0}), (Shares{11, 5}));         // 11.43, 4.57
  // Every replica keeps one micro-batch, however slow.
  EXPECT_EQ(SharesBySpeed(4, {100.0, 1.0, 1.0}), (Shares{2, 1, 1}));
  // Interleaved over 2 stages: multiples of 2.
  EXPECT_EQ(SharesBySpeed(12, {1.0, 0.5}, 2), (Shares{8, 4}));
  EXPECT_TRUE(SharesBySpeed(7, {1.0, 0.5}, 2).empty());  // 7 micro-batches: no multiples of 2
  EXPECT_TRUE(SharesBySpeed(2, {1.0, 1.0, 1.0}).empty());
  for (int64_t m = 1; m <= 40; ++m) {
    for (const std::vector<double>& speeds :
         {std::vector<double>{1}, {1, 0.3}, {0.7, 1, 0.2}, {1, 1, 1, 0.01}}) {
      const Shares shares = SharesBySpeed(m, speeds);
      if (m < static_cast<int64_t>(speeds.size())) continue;
      EXPECT_TRUE(CheckShares(shares, m, static_cast<int>(speeds.size())).ok()) << m;
    }
  }
}

TEST(BatchSplit, SharesThatDoNotCoverTheStepAreRefusedByName) {
  EXPECT_NE(CheckShares({3, 3}, 8, 2).message().find("8 in all"), std::string::npos);
  EXPECT_NE(CheckShares({8}, 8, 2).message().find("one count per replica"), std::string::npos);
  EXPECT_FALSE(CheckShares({8, 0}, 8, 2).ok());
  EXPECT_TRUE(CheckShares({}, 8, 2).ok());
  EXPECT_EQ(SharesText({5, 3}), "5,3");
  EXPECT_FALSE(Uneven({}));
  EXPECT_FALSE(Uneven({3, 3, 2}));
  EXPECT_TRUE(Uneven({2, 3, 3}));
}

}  // namespace
}  // namespace mitra::planner
