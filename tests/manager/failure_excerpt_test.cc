// Which lines of a failed worker's output its report quotes, and its message in one line.
#include "manager/failure_excerpt.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mitra::manager {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(FailureExcerpt, LeavesOutHeartbeatRecordsHoweverWritten) {
  const FailureExcerpt excerpt =
      ExcerptOf({}, {"@mitra {\"event\":\"heartbeat\",\"rank\":1}", "fatal: out of memory",
                     "@mitra {\"rank\":1, \"event\": \"heartbeat\"}"});
  EXPECT_EQ(excerpt.tail, std::vector<std::string>{"fatal: out of memory"});
  EXPECT_TRUE(ExcerptOf({}, {"@mitra {\"event\":\"starting\",\"rank\":0}"}).empty());
}

TEST(FailureExcerpt, AKnownErrorComesWithWhatToDo) {
  const FailureExcerpt missing =
      ExcerptOf({}, {"Traceback (most recent call last):", "  File \"train.py\", line 3",
                     "ModuleNotFoundError: No module named 'mitra'"});
  EXPECT_TRUE(Contains(missing.Hint(), "run scripts/setup as root")) << missing.Hint();
  EXPECT_TRUE(Contains(FormatFailureReport("rank 0 exited with code 1", "logs/gen-0/rank-0.log",
                                           missing),
                       "\nmitra: hint: the workers' Python cannot import mitra: "));
  EXPECT_EQ(ExcerptOf({}, {"ValueError: boom"}).Hint(), "");
}

TEST(FailureExcerpt, ARepeatedFailureIsNotQuotedAgain) {
  EXPECT_EQ(FormatFailureReport("rank 0 exited with code 1 after step 4", "logs/gen-1/rank-0.log",
                                ExcerptOf({}, {"ValueError: boom"}), /*same_as_before=*/true),
            "mitra: rank 0 exited with code 1 after step 4\n"
            "mitra: the same error lines as the failure before (in logs/gen-1/rank-0.log)\n");
}

TEST(FailureExcerpt, TheMessageIsAnExceptionsWhatElseTheLastErrorElseTheLastLine) {
  EXPECT_EQ(ExcerptOf({"terminate called after throwing an instance of 'c10::Error'",
                       "  what():  \"addmm_impl_cpu_\" not implemented for 'BFloat16'"},
                      {"Exception raised from addmm_impl_cpu_ (most recent call first):",
                       "frame #0: c10::Error::Error(c10::SourceLocation, std::string)"})
                .Message(),
            "\"addmm_impl_cpu_\" not implemented for 'BFloat16'");
  EXPECT_EQ(ExcerptOf({}, {"Traceback (most recent call last):", "  File \"train.py\"",
                           "ValueError: boom in the segment"})
                .Message(),
            "ValueError: boom in the segment");
  EXPECT_EQ(ExcerptOf({}, {"[2025-01-01 12:00:00.123] [error] rank 0: unknown schedule 'zb-v'",
                           "[2025-01-01 12:00:00.124] [info] bye"})
                .Message(),
            "rank 0: unknown schedule 'zb-v'");
  EXPECT_EQ(ExcerptOf({}, {"gpt_train: unknown option --foo", "usage: gpt_train [flags]", ""})
                .Message(),
            "usage: gpt_train [flags]");
  EXPECT_EQ(ExcerptOf({}, {}).Message(), "");
}

TEST(FailureExcerpt, TheKeyOfAFailureLeavesOutNumbers) {
  EXPECT_EQ(ExcerptOf({}, {"[12:00:01] [error] rank 3 (pid 4242): port 29400 taken"}).Key(),
            ExcerptOf({}, {"[12:07:59] [error] rank 0 (pid 17): port 29511 taken"}).Key());
  EXPECT_NE(ExcerptOf({}, {"Error: out of memory"}).Key(),
            ExcerptOf({}, {"Error: disk full"}).Key());
}

TEST(FailureExcerpt, TheReportQuotesTheErrorLinesBeforeTheTail) {
  const std::string plain = FormatFailureReport(
      "rank 1 (pid 4242) exited with code 7", "logs/gen-0/rank-1.log",
      ExcerptOf({}, {"loading", "fatal: out of memory"}));
  EXPECT_EQ(plain,
            "mitra: rank 1 (pid 4242) exited with code 7\n"
            "mitra: last 2 lines of logs/gen-0/rank-1.log:\n"
            "  | loading\n"
            "  | fatal: out of memory\n");
  const std::string with_errors = FormatFailureReport(
      "rank 0 exited with code 134", "logs/gen-2/rank-0.log",
      ExcerptOf({"  what():  boom"}, {"frame #0", "frame #1"}));
  EXPECT_TRUE(Contains(with_errors, "mitra: error lines and the last 2 lines of "
                                    "logs/gen-2/rank-0.log:\n  |   what():  boom\n  | ...\n"
                                    "  | frame #0\n"))
      << with_errors;
  EXPECT_EQ(FormatFailureReport("rank 0 hung", "logs/gen-0/rank-0.log", FailureExcerpt{}),
            "mitra: rank 0 hung\n");
  EXPECT_EQ(FormatFailureReport("rank 0 exited with code 2", "logs/gen-0/rank-0.log",
                                ExcerptOf({}, {"error: bad flag"})),
            "mitra: rank 0 exited with code 2\n"
            "mitra: last line of logs/gen-0/rank-0.log:\n"
            "  | error: bad flag\n");
}

}  // namespace
}  // namespace mitra::manager
