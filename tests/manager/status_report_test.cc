#include "manager/status_report.h"

#include <gtest/gtest.h>


namespace mitra::manager {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

StatusReport FullReport() {
  StatusReport r;
  r.state = "running";
  r.generation = 3;
  r.stages = 2;
  r.replicas = 2;
  r.step = 120;
  r.max_steps = 500;
  r.loss = 2.31;
  r.tokens_per_s = 5400;
  r.machines.push_back({"127.0.0.2", 2, "in use", 2, std::nullopt, ""});
  r.machines.push_back({"127.0.0.4", 2, "in use", 1, std::nullopt, ""});
  r.machines.push_back({"127.0.0.3", 1, "failed", 0, 1000.0 + 40, "ssh exited with 255"});
  JsonObject event;
  event.SetNumber("time", 1000.0 - 12).SetString("event", "morph").SetString(
      "reason", "machine list changed");
  r.last_event = event;
  r.list_rejected = "machines.txt:2: 'slots=x' is not a slot count";
  return r;
}

TEST(StatusReport, RoundTripsThroughJson) {
  const JsonObject json = FullReport().ToJson();
  EXPECT_TRUE(json.Find("ok")->bool_value());
  Result<JsonObject> reparsed = JsonObject::Parse(json.ToJson());
  ASSERT_TRUE(reparsed.ok()) << reparsed.status().ToString();
  const StatusReport r = StatusReport::FromJson(*reparsed);
  EXPECT_EQ(r.state, "running");
  EXPECT_EQ(r.generation, 3);
  EXPECT_EQ(r.step, 120);
  EXPECT_DOUBLE_EQ(*r.loss, 2.31);
  ASSERT_EQ(r.machines.size(), 3u);
  EXPECT_EQ(r.machines[1].used_slots, 1);
  EXPECT_EQ(r.machines[2].state, "failed");
  EXPECT_DOUBLE_EQ(*r.machines[2].until, 1040.0);
  EXPECT_EQ(r.machines[2].reason, "ssh exited with 255");
  ASSERT_TRUE(r.last_event.has_value());
  EXPECT_EQ(r.last_event->GetString("event"), "morph");
  EXPECT_EQ(r.list_rejected, "machines.txt:2: 'slots=x' is not a slot count");
}

TEST(StatusReport, FormatsEveryPart) {
  const std::string text = FormatStatus(FullReport(), 1000.0);
  EXPECT_TRUE(Contains(text, "running: generation 3, shape 2 x 2 (2 stages x 2 replicas)\n"))
      << text;
  EXPECT_TRUE(Contains(text, "  step        120 / 500\n")) << text;
  EXPECT_TRUE(Contains(text, "  loss        2.3100\n")) << text;
  EXPECT_TRUE(Contains(text, "  throughput  5400 tokens/s\n")) << text;
  EXPECT_TRUE(Contains(text, "machines    3 machines, 5 slots: 3 in use, 1 idle\n")) << text;
  EXPECT_TRUE(Contains(text, "    127.0.0.2  2 slots  in use\n")) << text;
  EXPECT_TRUE(Contains(text, "    127.0.0.4  2 slots  in use 1 of 2 (1 idle)\n")) << text;
  EXPECT_TRUE(Contains(text, "1 slot   failed until ")) << text;
  EXPECT_TRUE(Contains(text, " (in 40 s): ssh exited with 255\n")) << text;
  EXPECT_TRUE(Contains(text, "  last event  morph 12 s ago: machine list changed\n")) << text;
  EXPECT_TRUE(Contains(text, "  list edit   refused, the list before it stays in force: "
                             "machines.txt:2: 'slots=x' is not a slot count\n"))
      << text;
}

TEST(StatusReport, AProgramWithoutTokensShowsSamplesPerSecond) {
  StatusReport r = FullReport();
  r.tokens_per_s.reset();
  r.samples_per_s = 812;
  const StatusReport back = StatusReport::FromJson(*JsonObject::Parse(r.ToJson().ToJson()));
  EXPECT_TRUE(Contains(FormatStatus(back, 1000.0), "  throughput  812 samples/s\n"));
}

TEST(StatusReport, FormatsAnAlmostEmptyReport) {
  StatusReport r;
  EXPECT_EQ(FormatStatus(r, 0), "unknown state\n");
  r.state = "waiting";
  r.reason = "waiting for 2 more slots";
  EXPECT_EQ(FormatStatus(r, 0), "waiting\n  reason      waiting for 2 more slots\n");
}

TEST(StatusReport, IgnoresMissingAndMistypedFields) {
  Result<JsonObject> json = JsonObject::Parse(
      R"({"ok":true,"state":7,"step":"many","stages":2,"machines":{"not":"a list"},)"
      R"("last_event":[1,2],"loss":null})");
  ASSERT_TRUE(json.ok());
  const StatusReport r = StatusReport::FromJson(*json);
  EXPECT_EQ(r.state, "");
  EXPECT_FALSE(r.step.has_value());
  EXPECT_EQ(r.stages, 2);
  EXPECT_FALSE(r.replicas.has_value());
  EXPECT_FALSE(r.loss.has_value());
  EXPECT_TRUE(r.machines.empty());
  EXPECT_FALSE(r.last_event.has_value());
  EXPECT_EQ(FormatStatus(r, 0), "unknown state\n");  // no shape without both numbers
}

TEST(StatusReport, DescribesAnEventWithoutAReasonByItsFields) {
  StatusReport r;
  r.state = "running";
  JsonObject event;
  event.SetNumber("time", 95).SetString("event", "launch").SetInt("generation", 4).SetInt(
      "world_size", 6);
  r.last_event = event;
  EXPECT_TRUE(Contains(FormatStatus(r, 100), "last event  launch 5 s ago: generation=4 "
                                             "world_size=6\n"));
}

TEST(StatusReport, ParsesArraysOfObjects) {
  Result<std::vector<JsonObject>> empty = ParseJsonObjectArray(" [ ] ");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  Result<std::vector<JsonObject>> two =
      ParseJsonObjectArray(R"([{"a":"x,]}","b":[1,{"c":2}]}, {"a":"y\"}"}])");
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].GetString("a"), "x,]}");
  EXPECT_EQ((*two)[1].GetString("a"), "y\"}");
  EXPECT_FALSE(ParseJsonObjectArray("[1,2]").ok());
  EXPECT_FALSE(ParseJsonObjectArray("{\"a\":1}").ok());
  EXPECT_FALSE(ParseJsonObjectArray("[{\"a\":1}").ok());
}

// Found by fuzz/control_request_fuzz.cc: a time beyond time_t was converted to one.
TEST(StatusReport, AnUntilBeyondAnyClockIsShownAsUnknown) {
  StatusReport r;
  r.state = "running";
  r.machines.push_back({"127.0.0.3", 1, "failed", 0, 1.768e34, "ssh exited with 255"});
  EXPECT_TRUE(Contains(FormatStatus(r, 1000.0), "failed until ? (in ")) << FormatStatus(r, 1000.0);
}

}  // namespace
}  // namespace mitra::manager
