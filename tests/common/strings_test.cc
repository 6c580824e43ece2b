#include "common/strings.h"

#include <gtest/gtest.h>

namespace mitra {
namespace {

TEST(Strings, TrimAndSplitFields) {
  EXPECT_EQ(Trim("  a b \t\r\n"), "a b");
  EXPECT_EQ(Trim(" \t "), "");
  const std::vector<std::string_view> fields = SplitFields("  localhost \t slots=2  ");
  ASSERT_EQ(fields.size(), 2u);
  EXPECT_EQ(fields[0], "localhost");
  EXPECT_EQ(fields[1], "slots=2");
  EXPECT_TRUE(SplitFields("   ").empty());
}

TEST(Strings, SplitLinesKeepsEmptyLinesButNoTrailingOne) {
  const std::vector<std::string_view> lines = SplitLines("a\n\nb\n");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "");
  EXPECT_EQ(SplitLines("a\nb").size(), 2u);
  EXPECT_TRUE(SplitLines("").empty());
}

TEST(Strings, ParseInt64IsStrict) {
  EXPECT_EQ(ParseInt64("42"), 42);
  EXPECT_EQ(ParseInt64("-7"), -7);
  for (const char* bad : {"", " 1", "1 ", "+1", "0x10", "1.0", "abc", "99999999999999999999"}) {
    EXPECT_EQ(ParseInt64(bad), std::nullopt) << bad;
  }
}

TEST(Strings, ParseDoubleIsStrict) {
  EXPECT_EQ(ParseDouble("0.5"), 0.5);
  EXPECT_EQ(ParseDouble("30"), 30);
  EXPECT_EQ(ParseDouble("1e-3"), 1e-3);
  for (const char* bad : {"", " 1", "1s", "nan", "inf", "0x1p3", "1e999", "abc"}) {
    EXPECT_EQ(ParseDouble(bad), std::nullopt) << bad;
  }
}

TEST(Strings, JoinAndLastLines) {
  EXPECT_EQ(Join({"a", "b", "c"}, ", "), "a, b, c");
  EXPECT_EQ(Join({}, ", "), "");
  EXPECT_EQ(LastLines("1\n2\n3\n", 2), (std::vector<std::string>{"2", "3"}));
  EXPECT_EQ(LastLines("1", 5), (std::vector<std::string>{"1"}));
}

}  // namespace
}  // namespace mitra
