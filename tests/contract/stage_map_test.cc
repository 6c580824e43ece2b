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

TEST(StageMap, ALargeJobsDefaultMapFitsOneEnvironmentString) {
  // 4 x 5,000 ranks listed would be ~108 KB, close to Linux's 128 KiB for one string.
  const StageMap big = StageMap::Default(4, 5000);
  EXPECT_EQ(big.ToString(), "4x5000");
  EXPECT_EQ(big.world_size(), 20000);
  Result<StageMap> read = StageMap::Parse(big.ToString());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->num_stages(), 4);
  EXPECT_EQ(read->num_replicas(), 5000);
  EXPECT_EQ(read->RankOf(3, 4999), 3 + 4 * 4999);
  EXPECT_EQ(read->PositionOf(19998).stage, 2);
  EXPECT_EQ(read->PositionOf(19998).replica, 4999);
  // Below the bound, the ranks are listed as ever.
  EXPECT_LE(StageMap::Default(4, 2000).ToString().size(), StageMap::kLongestListedText);
  EXPECT_EQ(StageMap::Default(4, 2000).ToString().find('x'), std::string::npos);
}

TEST(StageMap, CompactFormReadsAsTheDefaultLayout) {
  Result<StageMap> map = StageMap::Parse("2x3");
  ASSERT_TRUE(map.ok()) << map.status().message();
  EXPECT_EQ(map->ToString(), "2x3");
  const StageMap listed = StageMap::Default(2, 3);
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_EQ(map->PositionOf(rank).stage, listed.PositionOf(rank).stage);
    EXPECT_EQ(map->PositionOf(rank).replica, listed.PositionOf(rank).replica);
  }
  for (const char* text : {"0x3", "2x", "x3", "2x3x4", "2x-1", "1x1000000", "1000x1000"}) {
    Result<StageMap> bad = StageMap::Parse(text);
    EXPECT_FALSE(bad.ok()) << text;
    if (!bad.ok()) {
      EXPECT_NE(bad.status().message().find("2x3"), std::string::npos) << text;
    }
  }
}

TEST(StageMap, PositionOfUnknownRankThrows) {
  EXPECT_THROW(StageMap::Default(2, 1).PositionOf(2), std::out_of_range);
}

}  // namespace
}  // namespace mitra::contract
