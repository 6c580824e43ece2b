// The machine pool's rules, driven by hand: joining after a check, blame, backoff, views.
#include "manager/machine_pool.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tests/manager/machine_lists.h"

namespace mitra::manager {
namespace {

using testing::List;

std::vector<std::string> Addresses(const std::vector<Machine>& machines) {
  std::vector<std::string> out;
  for (const Machine& m : machines) out.push_back(m.Address());
  return out;
}

TEST(MachinePool, AnEditSaysWhatChangedAndChecksRemoteNewcomers) {
  MachinePool pool(MachinePoolOptions{});
  pool.Reset(List("localhost slots=2\na slots=2\nb slots=1\n"));
  const MachinePool::Change change = pool.Update(List("localhost slots=4\na slots=2\nc slots=1\n"));
  EXPECT_EQ(change.Describe(), "added c; removed b; localhost 2 -> 4 slots");
  EXPECT_EQ(Addresses(change.to_check), std::vector<std::string>{"c"});
  std::vector<std::string> out;
  EXPECT_EQ(Addresses(pool.Usable(&out)), (std::vector<std::string>{"localhost", "a"}));
  EXPECT_EQ(out, std::vector<std::string>{"c (being checked)"});
  EXPECT_TRUE(pool.CheckInFlight());
  EXPECT_TRUE(pool.OnChecked("c", true, "", 0).joined);
  EXPECT_EQ(pool.Usable(nullptr).size(), 3u);
}

TEST(MachinePool, AMachineBackInTheListIsCheckedAgain) {
  MachinePool pool(MachinePoolOptions{});
  pool.Reset(List("a slots=1\nb slots=1\n"));
  pool.Update(List("a slots=1\n"));
  const MachinePool::Change back = pool.Update(List("a slots=1\nb slots=1\n"));
  EXPECT_EQ(back.added, std::vector<std::string>{"b"});
  EXPECT_EQ(Addresses(back.to_check), std::vector<std::string>{"b"});
}

TEST(MachinePool, ADrainedMachineStaysOutUntilItsLineChanges) {
  MachinePool pool(MachinePoolOptions{});
  pool.Reset(List("a slots=2\nb slots=2\n"));
  EXPECT_FALSE(pool.Drain("c", "mitra drain"));  // not in the list
  EXPECT_TRUE(pool.Drain("b", "mitra drain"));
  EXPECT_TRUE(pool.Drained("b"));
  std::vector<std::string> out;
  EXPECT_EQ(Addresses(pool.Usable(&out)), std::vector<std::string>{"a"});
  EXPECT_EQ(out, std::vector<std::string>{"b (drained)"});
  Machine b;
  b.host = "b";
  b.slots = 2;
  EXPECT_TRUE(pool.Shrunk(b));
  // A passed health check does not bring it back, nor does an edit elsewhere in the list.
  pool.OnChecked("b", true, "", 0);
  pool.Update(List("a slots=2\nb slots=2\nc slots=1\n"));
  EXPECT_TRUE(pool.Drained("b"));
  for (const MachineView& v : pool.Views({})) {
    if (v.machine.Address() == "b") {
      EXPECT_EQ(v.state, MachineState::kDrained);
      EXPECT_EQ(v.reason, "mitra drain");
    }
  }
  // Its line changes: it is back.
  const MachinePool::Change change = pool.Update(List("a slots=2\nb slots=1\nc slots=1\n"));
  EXPECT_FALSE(pool.Drained("b"));
  EXPECT_EQ(change.undrained, std::vector<std::string>{"b"});
}

TEST(MachinePool, TheWordDrainInTheListDrainsWhileItIsThere) {
  MachinePool pool(MachinePoolOptions{});
  pool.Reset(List("a slots=2\nb slots=2\n"));
  const MachinePool::Change drained = pool.Update(List("a slots=2\nb slots=2 drain\n"));
  EXPECT_EQ(drained.Describe(), "drained b");
  EXPECT_EQ(Addresses(pool.Usable(nullptr)), std::vector<std::string>{"a"});
  const MachinePool::Change back = pool.Update(List("a slots=2\nb slots=2\n"));
  EXPECT_EQ(back.Describe(), "no longer drained b");
  EXPECT_EQ(Addresses(pool.Usable(nullptr)), (std::vector<std::string>{"a", "b"}));
}

TEST(MachinePool, BlameChecksOnceThenBacksOffAndFailedChecksDoubleTheWait) {
  MachinePool pool(MachinePoolOptions{2, 300, 600});
  pool.Reset(List("a slots=1\n"));
  MachinePool::Blame first = pool.BlameFailure("a", "crashed", 100);
  ASSERT_TRUE(first.check_now.has_value());
  EXPECT_FALSE(first.kept_out);
  EXPECT_EQ(pool.OnChecked("a", false, "refused", 100).backoff_s, 2);
  EXPECT_TRUE(pool.DueChecks(101).empty());
  EXPECT_EQ(pool.NextCheckDue(), 102);
  ASSERT_EQ(pool.DueChecks(102).size(), 1u);
  EXPECT_EQ(pool.OnChecked("a", false, "refused", 102).backoff_s, 4);
  ASSERT_EQ(pool.DueChecks(106).size(), 1u);
  EXPECT_EQ(pool.OnChecked("a", false, "refused", 106).backoff_s, 8);
  ASSERT_EQ(pool.DueChecks(114).size(), 1u);
  EXPECT_TRUE(pool.OnChecked("a", true, "", 114).joined);
  // A second failure of the job within the window: out for the backoff, no check at once.
  MachinePool::Blame second = pool.BlameFailure("a", "crashed again", 200);
  EXPECT_FALSE(second.check_now.has_value());
  EXPECT_TRUE(second.kept_out);
  EXPECT_EQ(second.failures, 2);
  EXPECT_EQ(second.backoff_s, 2);
  // Much later, the history is forgotten.
  EXPECT_TRUE(pool.OnChecked("a", true, "", 300).joined);
  EXPECT_TRUE(pool.BlameFailure("a", "crashed", 2000).check_now.has_value());
}

TEST(MachinePool, ViewsShowStateAndUse) {
  MachinePool pool(MachinePoolOptions{});
  pool.Reset(List("a slots=2\nb slots=2\n"));
  pool.BlameFailure("b", "lost", 0);
  pool.OnChecked("b", false, "connection refused", 0);
  pool.Update(List("b slots=2\n"));
  const std::vector<MachineView> views = pool.Views({"a", "a"});
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].machine.Address(), "b");
  EXPECT_EQ(views[0].state, MachineState::kFailed);
  EXPECT_EQ(views[0].reason, "connection refused");
  EXPECT_EQ(views[1].machine.Address(), "a");
  EXPECT_EQ(views[1].state, MachineState::kRemoved);
  EXPECT_EQ(views[1].used_slots, 2);
}

// Each state has one name, status shows it and a reader parses it back; no two share one.
TEST(MachineState, EachNameIsItsOwnAndReadsBack) {
  std::set<std::string> names;
  for (MachineState state : kMachineStates) {
    const std::string name = MachineStateName(state);
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(ParseMachineState(name), state) << name;
  }
  EXPECT_EQ(names.size(), 6u);
  EXPECT_EQ(ParseMachineState("in_use"), std::nullopt);  // a metric's label, not a state's name
  EXPECT_EQ(ParseMachineState(""), std::nullopt);
}

}  // namespace
}  // namespace mitra::manager
