#include "common/duration_text.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mitra {
namespace {

TEST(DurationText, SecondsTextIsTheShortestTextThatReadsBack) {
  EXPECT_EQ(SecondsText(30), "30");
  EXPECT_EQ(SecondsText(0.5), "0.5");
  EXPECT_EQ(SecondsText(0.1), "0.1");
}

TEST(DurationText, NarratedDurationsHaveOneDecimalAtMost) {
  EXPECT_EQ(DurationText(3.14), "3.1 s");
  EXPECT_EQ(DurationText(120), "120 s");
  EXPECT_EQ(DurationText(0.04), "0 s");
}

TEST(DurationText, ClockDurationReadsLikeAClock) {
  EXPECT_EQ(ClockDuration(7.4), "0:07");
  EXPECT_EQ(ClockDuration(725), "12:05");
  EXPECT_EQ(ClockDuration(10921), "3:02:01");
  EXPECT_EQ(ClockDuration(-3), "0:00");
}

TEST(DurationText, HumanDurationUsesTheTwoLargestUnits) {
  EXPECT_EQ(HumanDuration(-3), "0 s");
  EXPECT_EQ(HumanDuration(40.4), "40 s");
  EXPECT_EQ(HumanDuration(125), "2 min 5 s");
  EXPECT_EQ(HumanDuration(120), "2 min");
  EXPECT_EQ(HumanDuration(3 * 3600 + 4 * 60 + 5), "3 h 4 min");
}

TEST(DurationText, LocalTimeTextRefusesTimesNoTimeTHolds) {
  EXPECT_EQ(LocalTimeText(1e300, "%H:%M:%S"), "?");
  EXPECT_EQ(LocalTimeText(std::nan(""), "%H:%M:%S"), "?");
  const std::string now = LocalTimeText(1.7e9, "%Y-%m-%d %H:%M:%S");
  EXPECT_EQ(now.size(), 19u) << now;  // a real date and time
}

}  // namespace
}  // namespace mitra
