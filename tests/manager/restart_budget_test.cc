// The restart budget's rules, driven by hand with the time given: no clock, no process.
#include "manager/restart_budget.h"

#include <gtest/gtest.h>

namespace mitra::manager {
namespace {

using Verdict = RestartBudget::Verdict;

TEST(RestartBudget, MoreThanMaxRestartsWithinTheWindowSpendIt) {
  RestartBudget budget(RestartBudgetOptions{2, 600});
  EXPECT_EQ(budget.OnFailure(100), Verdict::kRelaunch);
  EXPECT_EQ(budget.OnFailure(200), Verdict::kRelaunch);
  EXPECT_EQ(budget.OnFailure(300), Verdict::kSpent);
  EXPECT_EQ(budget.failures(), 3);
}

TEST(RestartBudget, FailuresOlderThanTheWindowAreForgotten) {
  RestartBudget budget(RestartBudgetOptions{2, 600});
  EXPECT_EQ(budget.OnFailure(0), Verdict::kRelaunch);
  EXPECT_EQ(budget.OnFailure(100), Verdict::kRelaunch);
  EXPECT_EQ(budget.OnFailure(650), Verdict::kRelaunch);  // the one at 0 is out of the window
  EXPECT_EQ(budget.failures(), 2);
  EXPECT_EQ(budget.OnFailure(690), Verdict::kSpent);
}

TEST(RestartBudget, WithoutRestartsTheFirstFailureSpendsIt) {
  RestartBudget budget(RestartBudgetOptions{0, 600});
  EXPECT_EQ(budget.OnFailure(5), Verdict::kSpent);
}

}  // namespace
}  // namespace mitra::manager
