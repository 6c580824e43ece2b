// The command line of `mitra status`, `mitra stop` and `mitra drain` (control_command.h).
#include "cli/control_command.h"

#include <gtest/gtest.h>

namespace mitra::cli {
namespace {

TEST(ControlCommandLine, ReadsTheFlags) {
  Result<ControlCommandOptions> status =
      ParseControlCommandLine({"status", "--run-dir", "runs/a", "--json", "--timeout=2.5"});
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->action, "status");
  EXPECT_EQ(status->run_dir, "runs/a");
  EXPECT_TRUE(status->json);
  EXPECT_DOUBLE_EQ(status->timeout_s, 2.5);

  Result<ControlCommandOptions> stop = ParseControlCommandLine({"stop", "--wait"});
  ASSERT_TRUE(stop.ok());
  EXPECT_EQ(stop->run_dir, "mitra-run");
  EXPECT_TRUE(stop->wait);
}

TEST(ControlCommandLine, RejectsWhatItDoesNotKnow) {
  Result<ControlCommandOptions> r = ParseControlCommandLine({"stop", "--json"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "mitra stop: unknown flag '--json'; see `mitra stop --help`");
  EXPECT_FALSE(ParseControlCommandLine({"status", "--run-dir"}).ok());
  EXPECT_FALSE(ParseControlCommandLine({"status", "--timeout", "0"}).ok());
  EXPECT_FALSE(ParseControlCommandLine({"status", "extra"}).ok());
  EXPECT_FALSE(ParseControlCommandLine({"status", "--json=yes"}).ok());
}

TEST(ControlCommandLine, HelpIsTheUsage) {
  Result<ControlCommandOptions> r = ParseControlCommandLine({"status", "--help"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->help_text, StatusUsage());
  EXPECT_EQ(ParseControlCommandLine({"stop", "-h"})->help_text, StopUsage());
}

}  // namespace
}  // namespace mitra::cli
