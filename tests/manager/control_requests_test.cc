#include "manager/control_requests.h"

#include <gtest/gtest.h>

#include "manager/status_report.h"

namespace mitra::manager {
namespace {

JsonObject Parsed(const std::string& line) {
  Result<JsonObject> o = JsonObject::Parse(line);
  EXPECT_TRUE(o.ok()) << line;
  return o.ok() ? *o : JsonObject();
}

TEST(ControlRequests, StopAsksTheRunEachTimeAndSaysWhenItIsUnderWay) {
  int stops = 0;
  ControlRequests requests({[&] { ++stops; }, nullptr}, "/runs/a", 42);
  const JsonObject first = Parsed(requests.Answer(JsonObject().SetString("command", "stop")));
  EXPECT_TRUE(first.Find("ok")->bool_value());
  EXPECT_NE(first.GetString("message")->find("stopping: every worker"), std::string::npos);
  const JsonObject second = Parsed(requests.Answer(JsonObject().SetString("command", "stop")));
  EXPECT_NE(second.GetString("message")->find("already stopping"), std::string::npos);
  EXPECT_EQ(stops, 2);  // the controller records the second as under way
}

TEST(ControlRequests, StatusIsTheSnapshotWithThePidAndRunDirectory) {
  ControlRequests starting({nullptr, nullptr}, "/runs/a", 42);
  const StatusReport early =
      StatusReport::FromJson(Parsed(starting.Answer(JsonObject().SetString("command", "status"))));
  EXPECT_EQ(early.state, "starting");
  EXPECT_EQ(early.manager_pid, 42);
  EXPECT_EQ(early.run_dir, "/runs/a");

  ControlRequests running(
      {nullptr, [] { return JsonObject().SetString("state", "running").SetInt("step", 7); }},
      "/runs/a", 42);
  const JsonObject answer = Parsed(running.Answer(JsonObject().SetString("command", "status")));
  EXPECT_TRUE(answer.Find("ok")->bool_value());
  EXPECT_EQ(answer.GetString("state"), "running");
  EXPECT_EQ(answer.GetNumber("step"), 7);
}

TEST(ControlRequests, AnUnknownCommandNamesTheOnesThereAre) {
  ControlRequests requests({nullptr, nullptr}, "/runs/a", 42);
  for (const JsonObject& request :
       {JsonObject().SetString("command", "restart"), JsonObject().SetInt("command", 3),
        JsonObject()}) {
    const JsonObject answer = Parsed(requests.Answer(request));
    EXPECT_FALSE(answer.Find("ok")->bool_value());
    EXPECT_NE(answer.GetString("error")->find("(status, stop)"), std::string::npos);
  }
}

}  // namespace
}  // namespace mitra::manager
