// The restart budget's rules, driven by hand with the time given: no clock, no process.
#include "manager/restart_budget.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mitra::manager {
namespace {

using Verdict = RestartBudget::Verdict;

// A failure at `time` after its generation trained (not an early one).
FailureSeen Late(double time) {
  FailureSeen f;
  f.time = time;
  f.exit = launcher::ExitStatus{1, 0};
  f.generation_trained = true;
  f.job_trained = true;
  return f;
}

// A rank that exited with `code` before its generation's first step, having printed `lines`.
FailureSeen Early(double time, int code, std::vector<std::string> lines, bool job_trained = true) {
  FailureSeen f;
  f.time = time;
  f.exit = launcher::ExitStatus{code, 0};
  f.output = ExcerptOf({}, lines);
  f.job_trained = job_trained;
  return f;
}

TEST(RestartBudget, MoreThanMaxRestartsWithinTheWindowSpendIt) {
  RestartBudget budget(RestartBudgetOptions{2, 600});
  EXPECT_EQ(budget.Judge(Late(100)), Verdict::kRelaunch);
  EXPECT_EQ(budget.Judge(Late(200)), Verdict::kRelaunch);
  EXPECT_EQ(budget.Judge(Late(300)), Verdict::kSpent);
  EXPECT_EQ(budget.failures(), 3);
}

TEST(RestartBudget, FailuresOlderThanTheWindowAreForgotten) {
  RestartBudget budget(RestartBudgetOptions{2, 600});
  EXPECT_EQ(budget.Judge(Late(0)), Verdict::kRelaunch);
  EXPECT_EQ(budget.Judge(Late(100)), Verdict::kRelaunch);
  EXPECT_EQ(budget.Judge(Late(650)), Verdict::kRelaunch);  // the one at 0 is out of the window
  EXPECT_EQ(budget.failures(), 2);
  EXPECT_EQ(budget.Judge(Late(690)), Verdict::kSpent);
}

TEST(RestartBudget, WithoutRestartsTheFirstFailureSpendsIt) {
  RestartBudget budget(RestartBudgetOptions{0, 600});
  EXPECT_EQ(budget.Judge(Late(5)), Verdict::kSpent);
}

TEST(RestartBudget, ExitCodeTwoBeforeTheJobsFirstStepIsABadConfiguration) {
  RestartBudget budget(RestartBudgetOptions{5, 600});
  EXPECT_EQ(budget.Judge(Early(1, 2, {"unknown schedule 'zb-v'"}, /*job_trained=*/false)),
            Verdict::kBadConfiguration);
  // Once the job has trained, exit code 2 (a bad placement line, say) is a failure like any.
  RestartBudget trained(RestartBudgetOptions{5, 600});
  FailureSeen late = Late(1);
  late.exit = launcher::ExitStatus{2, 0};
  EXPECT_EQ(trained.Judge(late), Verdict::kRelaunch);
  EXPECT_EQ(trained.Judge(Early(2, 2, {"bad line"}, /*job_trained=*/true)), Verdict::kRelaunch);
}

TEST(RestartBudget, TheSameEarlyFailureTwiceInARowEndsTheJob) {
  RestartBudget budget(RestartBudgetOptions{5, 600});
  const std::vector<std::string> crash = {
      "[2025-01-01 10:00:00.001] [info] rank 0 = stage 0",
      "terminate called after throwing an instance of 'c10::Error'",
      "  what():  \"addmm_impl_cpu_\" not implemented for 'BFloat16'", "frame #0: 0x7f01"};
  EXPECT_EQ(budget.Judge(Early(10, 134, crash)), Verdict::kRelaunch);
  // The next launch fails the same way; its times and addresses differ.
  std::vector<std::string> again = crash;
  again[0] = "[2025-01-01 10:00:04.512] [info] rank 0 = stage 0";
  again[3] = "frame #0: 0x7f99";
  EXPECT_EQ(budget.Judge(Early(14, 134, again)), Verdict::kRepeated);
}

TEST(RestartBudget, ARepeatOnAMachineKeptOutForItIsRelaunchedWithoutIt) {
  RestartBudget budget(RestartBudgetOptions{5, 600});
  const std::vector<std::string> crash = {"Error: CUDA error: uncorrectable ECC error"};
  EXPECT_EQ(budget.Judge(Early(1, 1, crash)), Verdict::kRelaunch);
  FailureSeen on_flaky_machine = Early(2, 1, crash);
  on_flaky_machine.machine_kept_out = true;
  EXPECT_EQ(budget.Judge(on_flaky_machine), Verdict::kRelaunch);
  // The next launch, without that machine, fails the same way elsewhere: the program.
  EXPECT_EQ(budget.Judge(Early(3, 1, crash)), Verdict::kRepeated);
}

TEST(RestartBudget, AnEarlyFailureUnlikeTheLastOrAfterAStepIsRelaunched) {
  RestartBudget budget(RestartBudgetOptions{5, 600});
  EXPECT_EQ(budget.Judge(Early(1, 1, {"Error: out of memory"})), Verdict::kRelaunch);
  EXPECT_EQ(budget.Judge(Early(2, 3, {"Error: out of memory"})), Verdict::kRelaunch)
      << "another exit";
  EXPECT_EQ(budget.Judge(Early(3, 3, {"Error: connection refused"})), Verdict::kRelaunch)
      << "another error";
  budget.OnStepTrained();
  EXPECT_EQ(budget.Judge(Early(4, 3, {"Error: connection refused"})), Verdict::kRelaunch)
      << "a step trained in between";
  // A failure that is no exit (a hang, a lost machine) breaks the chain.
  FailureSeen hang;
  hang.time = 5;
  EXPECT_EQ(budget.Judge(hang), Verdict::kRelaunch);
  EXPECT_EQ(budget.Judge(Early(6, 3, {"Error: connection refused"})), Verdict::kSpent)
      << "six failures: over the budget, though not a repeat";
}

// A rank that exited with code 1 at the job's step `step`, after its generation trained.
FailureSeen LateWith(double time, int64_t step, std::vector<std::string> lines) {
  FailureSeen f = Late(time);
  f.step = step;
  f.output = ExcerptOf({}, lines);
  return f;
}

const std::vector<std::string> kTraceback = {
    "Traceback (most recent call last):", "  File \"train.py\", line 41, in loss",
    "    return logits[mask].sum() / n", "ZeroDivisionError: division by zero"};

TEST(RestartBudget, TheSameErrorAtTheSameStepInTwoLaunchesInARowEndsTheJob) {
  RestartBudget budget(RestartBudgetOptions{5, 600});
  EXPECT_EQ(budget.Judge(LateWith(10, 5, kTraceback)), Verdict::kRelaunch);
  budget.OnStepTrained();  // the relaunch resumes from step 3 and trains steps 4 and 5
  EXPECT_EQ(budget.Judge(LateWith(20, 5, kTraceback)), Verdict::kRepeated);
}

TEST(RestartBudget, ALateFailureThatChangesIsRelaunched) {
  RestartBudget budget(RestartBudgetOptions{5, 600});
  EXPECT_EQ(budget.Judge(LateWith(10, 5, kTraceback)), Verdict::kRelaunch);
  EXPECT_EQ(budget.Judge(LateWith(20, 9, kTraceback)), Verdict::kRelaunch) << "another step";
  std::vector<std::string> other = kTraceback;
  other.back() = "KeyError: 'labels'";
  EXPECT_EQ(budget.Judge(LateWith(30, 9, other)), Verdict::kRelaunch) << "another error";
  // A peer's loss, or a preemption, twice: no error printed, so nothing says it will repeat.
  EXPECT_EQ(budget.Judge(LateWith(40, 9, {"step 9 loss 2.1"})), Verdict::kRelaunch);
  EXPECT_EQ(budget.Judge(LateWith(50, 9, {"step 9 loss 2.1"})), Verdict::kRelaunch)
      << "no error line";
  EXPECT_EQ(budget.Judge(LateWith(60, 9, other)), Verdict::kSpent)
      << "six failures: over the budget";
}

TEST(RestartBudget, ALateRepeatOnAMachineKeptOutForItIsRelaunched) {
  RestartBudget budget(RestartBudgetOptions{5, 600});
  EXPECT_EQ(budget.Judge(LateWith(10, 5, kTraceback)), Verdict::kRelaunch);
  FailureSeen on_flaky_machine = LateWith(20, 5, kTraceback);
  on_flaky_machine.machine_kept_out = true;
  EXPECT_EQ(budget.Judge(on_flaky_machine), Verdict::kRelaunch);
  EXPECT_EQ(budget.Judge(LateWith(30, 5, kTraceback)), Verdict::kRepeated);
}

}  // namespace
}  // namespace mitra::manager
