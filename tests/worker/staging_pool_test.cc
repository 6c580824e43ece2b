// StagingPool: a buffer given back is the one the next Take of its shape gets (its pages already
// in memory), Reserve adds only what is missing, Clear frees everything kept.
#include "worker/state/staging_pool.h"

#include <gtest/gtest.h>

#include <cstdint>

#include <torch/torch.h>

namespace mitra::worker {
namespace {

constexpr int64_t kPage = 4096;

class StagingPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { pool_.Clear(); }
  void TearDown() override { pool_.Clear(); }
  StagingPool& pool_ = StagingPool::OfProcess();
};

TEST_F(StagingPoolTest, ABufferGivenBackIsTheOneTheNextTakeOfItsShapeGets) {
  const int64_t before = pool_.allocated_bytes();
  torch::Tensor a = pool_.Take({64, 32}, torch::kFloat32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data_ptr()) % kPage, 0u);
  EXPECT_EQ(pool_.allocated_bytes() - before, 64 * 32 * 4);
  void* memory = a.data_ptr();
  pool_.Give(std::move(a));
  EXPECT_EQ(pool_.kept_bytes(), 64 * 32 * 4);

  // Another shape or type: new memory; the same shape: the kept buffer, and nothing allocated.
  EXPECT_NE(pool_.Take({32, 64}, torch::kFloat32).data_ptr(), memory);
  EXPECT_NE(pool_.Take({64, 32}, torch::kFloat64).data_ptr(), memory);
  const int64_t allocated = pool_.allocated_bytes();
  EXPECT_EQ(pool_.Take({64, 32}, torch::kFloat32).data_ptr(), memory);
  EXPECT_EQ(pool_.allocated_bytes(), allocated);
  EXPECT_EQ(pool_.kept_bytes(), 0);
}

TEST_F(StagingPoolTest, ReserveAddsOnlyWhatIsMissingAndClearFreesEverything) {
  pool_.Give(pool_.Take({10}, torch::kFloat32));
  const int64_t allocated = pool_.allocated_bytes();
  // Two tensors of one shape, two buffers each: four, of which one was kept already; no
  // buffer for the scalar.
  const std::vector<torch::Tensor> like = {torch::ones({10}), torch::ones({10}),
                                           torch::scalar_tensor(1.0)};
  pool_.Reserve(like, 2);
  EXPECT_EQ(pool_.allocated_bytes() - allocated, 3 * 10 * 4);
  EXPECT_EQ(pool_.kept_bytes(), 4 * 10 * 4);
  pool_.Reserve(like, 1);  // holds them already
  EXPECT_EQ(pool_.kept_bytes(), 4 * 10 * 4);
  EXPECT_TRUE(torch::equal(pool_.Take({10}, torch::kFloat32), torch::zeros({10})));  // written
  pool_.Clear();
  EXPECT_EQ(pool_.kept_bytes(), 0);
  const int64_t after_clear = pool_.allocated_bytes();
  pool_.Take({10}, torch::kFloat32);
  EXPECT_EQ(pool_.allocated_bytes() - after_clear, 10 * 4);
}

}  // namespace
}  // namespace mitra::worker
