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

TEST(LineTail, KeepsTheLatestErrorLinesThatScrolledOutOfTheTail) {
  LineTail tail(3, 2);
  for (const char* line : {"loading", "Error: first", "terminate called after throwing",
                           "  what():  unknown schedule 'zb-v'", "frame #0", "frame #1",
                           "frame #2"}) {
    tail.Add(line);
  }
  EXPECT_EQ(tail.Lines(), (std::vector<std::string>{"frame #0", "frame #1", "frame #2"}));
  EXPECT_EQ(tail.EarlierErrors(), (std::vector<std::string>{"terminate called after throwing",
                                                            "  what():  unknown schedule 'zb-v'"}));
}

TEST(IsErrorLine, KnowsExceptionsLoggersAndCrashes) {
  for (const char* line :
       {"  what():  \"addmm_impl_cpu_\" not implemented for 'BFloat16'",
        "terminate called after throwing an instance of 'c10::Error'",
        "ValueError: boom in the segment", "[2025-01-01 12:00:00.000] [error] rank 0: bad",
        "train.cc:12: error: no such flag", "Segmentation fault (core dumped)"}) {
    EXPECT_TRUE(IsErrorLine(line)) << line;
  }
  for (const char* line : {"step 3 loss 2.1", "frame #4: c10::detail::torchCheckFail",
                           "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9c",
                           ""}) {
    EXPECT_FALSE(IsErrorLine(line)) << line;
  }
}

}  // namespace
}  // namespace mitra::launcher
