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

// What a restarted manager plans from: the newest correction of each machine and load, from
// profile checks and slow machines alike; records it cannot read are passed over.
TEST(RecordedCorrections, TheNewestOfEachMachineAndLoadIsInForce) {
  auto event = [](const std::string& name, const std::string& json) {
    records::EventRecord e;
    e.event = name;
    e.fields = JsonObject::Parse(json).value();
    return e;
  };
  const std::vector<records::EventRecord> events = {
      event("launch", R"({"generation":0})"),
      event("profile_check", R"({"corrections":[{"machine":"a:22","busy":1,"factor":1.5},)"
                             R"({"machine":"b:22","busy":1,"factor":1.5}]})"),
      event("slow_machine", R"({"machine":"b:22","ratio":2.0,"busy":1,"factor":3.0})"),
      event("slow_machine", R"({"machine":"c:22","ratio":2.0,"action":"none"})"),  // no correction
      event("profile_check", R"({"corrections":[{"machine":"a:22","busy":2,"factor":0.8},)"
                             R"({"machine":7}]})"),
  };
  const std::vector<planner::SpeedCorrection> kept = RecordedCorrections(events);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].address, "a:22");
  EXPECT_EQ(kept[0].busy, 1);
  EXPECT_DOUBLE_EQ(kept[0].factor, 1.5);
  EXPECT_EQ(kept[1].address, "b:22");
  EXPECT_DOUBLE_EQ(kept[1].factor, 3.0);
  EXPECT_EQ(kept[2].address, "a:22");
  EXPECT_EQ(kept[2].busy, 2);
  EXPECT_DOUBLE_EQ(kept[2].factor, 0.8);
  EXPECT_TRUE(RecordedCorrections({}).empty());
}

}  // namespace
}  // namespace mitra::manager
