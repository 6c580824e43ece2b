// Unit tests of mixed precision's parts that need no peers: the loss scaler's rules, the
// autocast scope, and what this CPU build refuses (fp16, cuda, nccl) and how it says so.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "mitra/worker/backend.h"
#include "mitra/worker/loss_scaler.h"
#include "worker/step/precision.h"

namespace mitra::worker {
namespace {

LossScalerOptions Scaling(double initial, int64_t growth_interval) {
  LossScalerOptions o;
  o.enabled = true;
  o.initial_scale = initial;
  o.growth_interval = growth_interval;
  return o;
}

TEST(LossScaler, SkipsAndHalvesOnOverflow) {
  LossScaler scaler(Scaling(65536, 3));
  EXPECT_TRUE(scaler.Update(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(scaler.scale(), 32768);
  EXPECT_TRUE(scaler.Update(std::nan("")));
  EXPECT_EQ(scaler.scale(), 16384);
  EXPECT_FALSE(scaler.Update(1e30));  // large but finite is a good step
  EXPECT_EQ(scaler.scale(), 16384);
  EXPECT_EQ(scaler.good_steps(), 1);
}

TEST(LossScaler, DoublesAfterGrowthIntervalGoodStepsInARow) {
  LossScaler scaler(Scaling(8, 3));
  scaler.Update(1);
  scaler.Update(1);
  EXPECT_EQ(scaler.scale(), 8);
  EXPECT_TRUE(scaler.Update(INFINITY));  // an overflow starts the count again
  EXPECT_EQ(scaler.scale(), 4);
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(scaler.Update(1));
  EXPECT_EQ(scaler.scale(), 4);
  EXPECT_FALSE(scaler.Update(1));
  EXPECT_EQ(scaler.scale(), 8);
  EXPECT_EQ(scaler.good_steps(), 0);
}

TEST(LossScaler, NeverGoesBelowOne) {
  LossScaler scaler(Scaling(2, 100));
  for (int i = 0; i < 5; ++i) scaler.Update(INFINITY);
  EXPECT_EQ(scaler.scale(), 1);
}

TEST(LossScaler, UnscalesGradientsExactlyAndRestoresItsState) {
  LossScaler scaler(Scaling(1024, 10));
  auto p = torch::randn({5}).requires_grad_(true);
  auto g = torch::randn({5});
  p.mutable_grad() = g * 1024;
  auto no_grad = torch::randn({3}).requires_grad_(true);  // a parameter without a gradient
  scaler.Unscale({p, no_grad});
  EXPECT_TRUE(torch::equal(p.grad(), g));  // a power of two: no rounding
  EXPECT_FALSE(no_grad.grad().defined());
  scaler.Restore(256, 7);
  EXPECT_EQ(scaler.scale(), 256);
  EXPECT_EQ(scaler.good_steps(), 7);
}

TEST(Precision, NcclRefusesASecondRankOnAGpuWithTheFix) {
  EXPECT_TRUE(CheckNcclGpuSharing(0, 1).ok());
  EXPECT_TRUE(CheckNcclGpuSharing(1, 2).ok());
  const Status s = CheckNcclGpuSharing(1, 1);  // two ranks, one GPU: NCCL aborts
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("local rank 1 would share GPU 0 with local rank 0"),
            std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--backend gloo"), std::string::npos) << s.message();
  EXPECT_NE(CheckNcclGpuSharing(5, 2).message().find("share GPU 1 with local rank 3"),
            std::string::npos);
}

TEST(Precision, Bf16AutocastCastsMatrixProductsAndRestoresTheState) {
  auto a = torch::randn({4, 8}), b = torch::randn({8, 3});
  ASSERT_FALSE(at::autocast::is_cpu_enabled());
  {
    AutocastScope fp32(Precision::kFp32, c10::DeviceType::CPU);
    EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kFloat);
    EXPECT_FALSE(at::autocast::is_cpu_enabled());
  }
  {
    AutocastScope bf16(Precision::kBf16, c10::DeviceType::CPU);
    EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kBFloat16);
    {
      AutocastScope nested(Precision::kBf16, c10::DeviceType::CPU);
      EXPECT_TRUE(at::autocast::is_cpu_enabled());
    }
    EXPECT_TRUE(at::autocast::is_cpu_enabled()) << "an inner scope ended the outer one";
  }
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  EXPECT_EQ(torch::matmul(a, b).scalar_type(), torch::kFloat);
}

TEST(Precision, NamesAreCheckedAndFp16IsRefusedOnTheCpu) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    EXPECT_EQ(*ParsePrecision(PrecisionName(p)), p);
  }
  auto fp8 = ParsePrecision("fp8");
  ASSERT_FALSE(fp8.ok());
  EXPECT_EQ(fp8.status().message(), "unknown precision 'fp8' (expected fp32, bf16 or fp16)");
  EXPECT_TRUE(CheckPrecisionOn(Precision::kFp16, c10::DeviceType::CUDA).ok());
  EXPECT_TRUE(CheckPrecisionOn(Precision::kBf16, c10::DeviceType::CPU).ok());
  Status fp16 = CheckPrecisionOn(Precision::kFp16, c10::DeviceType::CPU);
  ASSERT_FALSE(fp16.ok());
  EXPECT_NE(fp16.message().find("--precision bf16"), std::string::npos) << fp16.message();
}

TEST(Precision, CudaAndNcclAreRefusedOnThisBuildNamingTheGpuBuild) {
  EXPECT_EQ(*ParseDeviceKind(DeviceKindName(DeviceKind::kCuda)), DeviceKind::kCuda);
  EXPECT_FALSE(ParseDeviceKind("gpu").ok());
  EXPECT_TRUE(LocalDevice(DeviceKind::kCpu, 0).ok());
  EXPECT_EQ(*ParseBackend(BackendName(Backend::kGloo)), Backend::kGloo);
  auto mpi = ParseBackend("mpi");
  ASSERT_FALSE(mpi.ok());
  EXPECT_EQ(mpi.status().message(), "unknown backend 'mpi' (expected gloo or nccl)");
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA build: cuda is not refused";
  auto cuda = LocalDevice(DeviceKind::kCuda, 0);
  ASSERT_FALSE(cuda.ok());
  EXPECT_NE(cuda.status().message().find("scripts/gpu-build"), std::string::npos)
      << cuda.status().message();
  auto nccl = ParseBackend("nccl");
  ASSERT_FALSE(nccl.ok()) << "a CPU LibTorch built with MITRA_WITH_NCCL";
  EXPECT_NE(nccl.status().message().find("scripts/gpu-build"), std::string::npos)
      << nccl.status().message();
}

}  // namespace
}  // namespace mitra::worker
