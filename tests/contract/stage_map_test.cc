#include "mitra/contract/stage_map.h"

#include <gtest/gtest.h>

namespace mitra::contract {
namespace {

TEST(StageMap, DefaultPutsStageSOnRanksSPlusMultiplesOfP) {
  auto map = StageMap::Default(2, 2);
  EXPECT_EQ(map.ToString(), "0,2;1,3;");
  EXPECT_EQ(StageMap::Default(3, 1).ToString(), "0;1;2;");
  EXPECT_EQ(StageMap::Default(1, 3).ToString(), "0,1,2;");
  EXPECT_EQ(map.RankOf(1, 1), 3);
  EXPECT_EQ(map.PositionOf(2).stage, 0);
  EXPECT_EQ(map.PositionOf(2).replica, 1);
}

TEST(StageMap, ParsesVarunasFormatAndRoundTrips) {
  for (const char* text : {"0,2;1,3;", "0;1;2;3;", "0,1,2,3;", "3,1;0,2;"}) {
    auto map = StageMap::Parse(text);
    ASSERT_TRUE(map.ok()) << map.status().message();
    EXPECT_EQ(map->ToString(), text);
  }
  auto map = *StageMap::Parse("3,1;0,2;");
  EXPECT_EQ(map.num_stages(), 2);
  EXPECT_EQ(map.num_replicas(), 2);
  EXPECT_EQ(map.PositionOf(0).stage, 1);
  EXPECT_EQ(map.PositionOf(0).replica, 0);
  EXPECT_EQ(map.PositionOf(1).replica, 1);
}

TEST(StageMap, TrailingSemicolonIsOptional) {
  EXPECT_EQ(StageMap::Parse("0,2;1,3")->ToString(), "0,2;1,3;");
}

TEST(StageMap, RejectsMalformedMaps) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"", "names no stage"}, Case{"0,;1;", "missing before ';'"},
                        Case{"0,1;2;", "has 1 ranks but stage 0 has 2"},
                        Case{"0,0;1,2;", "appears twice"}, Case{"0,5;1,2;", "outside 0..3"},
                        Case{"0,a;", "unexpected character 'a'"}, Case{"0,1,", "ends with ','"}}) {
    auto map = StageMap::Parse(c.text);
    ASSERT_FALSE(map.ok()) << c.text;
    EXPECT_NE(map.status().message().find(c.says), std::string::npos)
        << c.text << ": " << map.status().message();
  }
}

TEST(StageMap, PositionOfUnknownRankThrows) {
  EXPECT_THROW(StageMap::Default(2, 1).PositionOf(2), std::out_of_range);
}

}  // namespace
}  // namespace mitra::contract
