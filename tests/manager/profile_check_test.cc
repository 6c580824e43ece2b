// ProfileCheck: a generation's steps against the prediction, once, after its warm-up.
#include "manager/profile_check.h"

#include <gtest/gtest.h>

namespace mitra::manager {
namespace {

TEST(ProfileCheck, AnswersOnceWithTheMedianAfterTheWarmUp) {
  ProfileCheck check(0.2);
  for (int i = 0; i < ProfileCheck::kWarmUpSteps; ++i) EXPECT_FALSE(check.Observe(9.0));
  for (int i = 0; i < ProfileCheck::kMeasuredSteps - 2; ++i) {
    EXPECT_FALSE(check.Observe(i % 2 == 0 ? 0.18 : 0.22));
  }
  EXPECT_FALSE(check.Observe(0.2));
  const auto verdict = check.Observe(0.2);
  ASSERT_TRUE(verdict);
  EXPECT_DOUBLE_EQ(verdict->measured_s, 0.2);
  EXPECT_DOUBLE_EQ(verdict->ratio, 1.0);
  EXPECT_FALSE(verdict->disagrees);
  EXPECT_FALSE(check.Observe(0.2));
}

TEST(ProfileCheck, DisagreesBeyondTheMarginEitherWayAndNeverWithoutAPrediction) {
  auto ratio_of = [](double predicted, double step) {
    ProfileCheck check(predicted);
    std::optional<ProfileCheck::Verdict> v;
    for (int i = 0; i < ProfileCheck::kWarmUpSteps + ProfileCheck::kMeasuredSteps; ++i) {
      v = check.Observe(step);
    }
    return v;
  };
  EXPECT_TRUE(ratio_of(0.1, 0.125)->disagrees);
  EXPECT_TRUE(ratio_of(0.1, 0.08)->disagrees);
  EXPECT_FALSE(ratio_of(0.1, 0.115)->disagrees);
  EXPECT_FALSE(ratio_of(0.1, 0.087)->disagrees);
  EXPECT_FALSE(ratio_of(0, 0.1));
}

}  // namespace
}  // namespace mitra::manager
