#include "launcher/output_lines.h"

#include <gtest/gtest.h>

namespace mitra::launcher {
namespace {

std::vector<std::string> Collect(LineSplitter& splitter, const std::vector<std::string>& chunks,
                                 bool finish) {
  std::vector<std::string> lines;
  auto add = [&lines](std::string_view line) { lines.emplace_back(line); };
  for (const std::string& chunk : chunks) splitter.Feed(chunk, add);
  if (finish) splitter.Finish(add);
  return lines;
}

TEST(LineSplitter, JoinsLinesAcrossChunks) {
  LineSplitter splitter;
  EXPECT_EQ(Collect(splitter, {"@mi", "tra {}\nsecond", " line\n", "tail"}, true),
            (std::vector<std::string>{"@mitra {}", "second line", "tail"}));
}

TEST(LineSplitter, DropsCarriageReturnsAndKeepsEmptyLines) {
  LineSplitter splitter;
  EXPECT_EQ(Collect(splitter, {"a\r\n\nb\n"}, true), (std::vector<std::string>{"a", "", "b"}));
}

TEST(LineSplitter, CutsOverlongLines) {
  LineSplitter splitter(4);
  EXPECT_EQ(Collect(splitter, {"abcdefghij\n"}, true),
            (std::vector<std::string>{"abcd", "efgh", "ij"}));
}

TEST(LineSplitter, FinishWithoutPartialLineEmitsNothing) {
  LineSplitter splitter;
  EXPECT_EQ(Collect(splitter, {"a\n"}, true), (std::vector<std::string>{"a"}));
}

TEST(LineTail, KeepsTheLastLines) {
  LineTail tail(2);
  tail.Add("1");
  tail.Add("2");
  tail.Add("3");
  EXPECT_EQ(tail.Lines(), (std::vector<std::string>{"2", "3"}));
  LineTail none(0);
  none.Add("x");
  EXPECT_TRUE(none.Lines().empty());
}

}  // namespace
}  // namespace mitra::launcher
