// The store's keys, values and waits without sockets or clocks: what each request answers, and
// which waits a request completes or a deadline ends.
#include "rendezvous/store_table.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace mitra::rendezvous {
namespace {

using TimePoint = StoreTable::TimePoint;
const TimePoint kT0{};  // the table never reads a clock: any instants do
const TimePoint kNever = TimePoint::max();

TimePoint At(int seconds) { return kT0 + std::chrono::seconds(seconds); }

Request Set(const std::string& key, const std::string& value) { return {Op::kSet, 0, {key}, value, {}}; }
Request WaitFor(std::vector<std::string> keys) { return {Op::kWait, 0, std::move(keys), {}, {}}; }

// The clients the answers go to, in order.
std::vector<uint64_t> Clients(const std::vector<StoreTable::Answer>& answers) {
  std::vector<uint64_t> clients;
  for (const auto& a : answers) clients.push_back(a.client);
  return clients;
}

TEST(StoreTable, AWaitIsHeldUntilTheRequestThatCreatesItsLastKeyAndAnsweredWithIt) {
  StoreTable table(1 << 20);
  EXPECT_TRUE(table.Handle(1, WaitFor({"a", "b", "a"}), kNever).empty());
  EXPECT_TRUE(table.Waiting(1));
  // Client 2's set of "a" answers client 2 only; its add to "b" completes client 1's wait.
  EXPECT_EQ(Clients(table.Handle(2, Set("a", "x"), kNever)), (std::vector<uint64_t>{2}));
  const auto answers = table.Handle(2, {Op::kAdd, 1, {"b"}, {}, {}}, kNever);
  ASSERT_EQ(Clients(answers), (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(answers[0].response.number, 1);
  EXPECT_EQ(answers[1].response.reply, Reply::kOk);
  EXPECT_FALSE(table.Waiting(1));
  // Keys that are there already: answered at once.
  EXPECT_EQ(Clients(table.Handle(1, WaitFor({"a", "b"}), kNever)), (std::vector<uint64_t>{1}));
}

TEST(StoreTable, AWaitPastItsDeadlineIsAnsweredTimedOutAndLeavesNoTraceForTheNextOne) {
  StoreTable table(1 << 20);
  EXPECT_TRUE(table.Handle(1, WaitFor({"k"}), At(5)).empty());
  EXPECT_EQ(table.NextDeadline(), At(5));
  EXPECT_TRUE(table.ExpireWaits(At(4)).empty());
  const auto expired = table.ExpireWaits(At(5));
  ASSERT_EQ(Clients(expired), (std::vector<uint64_t>{1}));
  EXPECT_EQ(expired[0].response.reply, Reply::kTimedOut);
  EXPECT_EQ(table.NextDeadline(), kNever);
  // The same client waits for the same key again: it is held again, and answered when it comes.
  EXPECT_TRUE(table.Handle(1, WaitFor({"k"}), At(10)).empty());
  EXPECT_EQ(Clients(table.Handle(2, Set("k", "v"), kNever)), (std::vector<uint64_t>{2, 1}));
}

TEST(StoreTable, AWaitThatTimedOutOnOneKeyLeavesTheNextWaitOnAnotherToItsOwnKey) {
  StoreTable table(1 << 20);
  table.Handle(1, WaitFor({"a"}), At(5));
  table.ExpireWaits(At(5));
  EXPECT_TRUE(table.Handle(1, WaitFor({"b"}), kNever).empty());
  EXPECT_EQ(Clients(table.Handle(2, Set("a", "v"), kNever)), (std::vector<uint64_t>{2}));
  EXPECT_TRUE(table.Waiting(1));
  EXPECT_EQ(Clients(table.Handle(2, Set("b", "v"), kNever)), (std::vector<uint64_t>{2, 1}));
}

TEST(StoreTable, AForgottenClientsWaitIsNeverAnswered) {
  StoreTable table(1 << 20);
  table.Handle(1, WaitFor({"k"}), At(5));
  table.Forget(1);
  EXPECT_EQ(Clients(table.Handle(2, Set("k", "v"), kNever)), (std::vector<uint64_t>{2}));
  EXPECT_TRUE(table.ExpireWaits(At(9)).empty());
}

TEST(StoreTable, TheByteCapRefusesAWriteAndChangesNothing) {
  StoreTable table(10);
  EXPECT_EQ(table.Handle(1, Set("k", "12345678"), kNever)[0].response.reply, Reply::kOk);
  EXPECT_EQ(table.bytes(), 9u);
  const auto full = table.Handle(1, Set("j", "12"), kNever);
  EXPECT_EQ(full[0].response.reply, Reply::kError);
  EXPECT_EQ(table.Handle(1, {Op::kGet, 0, {"j"}, {}, {}}, kNever)[0].response.reply,
            Reply::kNotFound);
  // A replaced value counts its old bytes out; a deleted key all of its own.
  EXPECT_EQ(table.Handle(1, Set("k", "123456789"), kNever)[0].response.reply, Reply::kOk);
  EXPECT_EQ(table.Handle(1, {Op::kDelete, 0, {"k"}, {}, {}}, kNever)[0].response.number, 1);
  EXPECT_EQ(table.bytes(), 0u);
}

TEST(StoreTable, AnAddToAValueThatIsNotANumberIsAnErrorNamingTheKey) {
  StoreTable table(1 << 20);
  table.Handle(1, Set("k", "text"), kNever);
  const auto answer = table.Handle(1, {Op::kAdd, 1, {"k"}, {}, {}}, kNever);
  EXPECT_EQ(answer[0].response.reply, Reply::kError);
  EXPECT_NE(answer[0].response.value.find("'k'"), std::string::npos);
}

}  // namespace
}  // namespace mitra::rendezvous
