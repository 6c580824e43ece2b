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
  ControlRequests requests({[&] { ++stops; }, nullptr, nullptr}, "/runs/a", 42);
  const JsonObject first = Parsed(requests.Answer(JsonObject().SetString("command", "stop")));
  EXPECT_TRUE(first.Find("ok")->bool_value());
  EXPECT_NE(first.GetString("message")->find("stopping: every worker"), std::string::npos);
  const JsonObject second = Parsed(requests.Answer(JsonObject().SetString("command", "stop")));
  EXPECT_NE(second.GetString("message")->find("already stopping"), std::string::npos);
  EXPECT_EQ(stops, 2);  // the controller records the second as under way
}

TEST(ControlRequests, AStopWhileWaitingForMachinesSaysNothingIsCheckpointed) {
  ControlRequests requests(
      {[] {}, [] { return JsonObject().SetString("state", "waiting"); }, nullptr}, "/runs/a", 42);
  const JsonObject answer = Parsed(requests.Answer(JsonObject().SetString("command", "stop")));
  EXPECT_EQ(answer.GetString("message"),
            "stopping: no worker runs (the job waits for machines), so the manager exits now");
}

TEST(ControlRequests, StatusIsTheSnapshotWithThePidAndRunDirectory) {
  ControlRequests starting({nullptr, nullptr, nullptr}, "/runs/a", 42);
  const StatusReport early =
      StatusReport::FromJson(Parsed(starting.Answer(JsonObject().SetString("command", "status"))));
  EXPECT_EQ(early.state, "starting");
  EXPECT_EQ(early.manager_pid, 42);
  EXPECT_EQ(early.run_dir, "/runs/a");

  ControlRequests running(
      {nullptr, [] { return JsonObject().SetString("state", "running").SetInt("step", 7); },
       nullptr},
      "/runs/a", 42);
  const JsonObject answer = Parsed(running.Answer(JsonObject().SetString("command", "status")));
  EXPECT_TRUE(answer.Find("ok")->bool_value());
  EXPECT_EQ(answer.GetString("state"), "running");
  EXPECT_EQ(answer.GetNumber("step"), 7);
}

TEST(ControlRequests, DrainAsksTheRunForAMachineOfTheList) {
  std::vector<std::string> drained;
  const auto status = [] {
    return StatusReport::FromJson(
               *JsonObject::Parse(R"({"state":"running","machines":[)"
                                  R"({"address":"127.0.0.2","state":"in use"},)"
                                  R"({"address":"127.0.0.3","state":"drained","reason":"mitra drain"}]})"))
        .ToJson();
  };
  ControlRequests requests({nullptr, status, [&](const std::string& a) { drained.push_back(a); }},
                           "/runs/a", 42);
  auto drain = [&](const std::string& machine) {
    return Parsed(requests.Answer(
        JsonObject().SetString("command", "drain").SetString("machine", machine)));
  };
  const JsonObject ok = drain("127.0.0.2");
  EXPECT_TRUE(ok.Find("ok")->bool_value());
  EXPECT_NE(ok.GetString("message")->find("draining 127.0.0.2"), std::string::npos);
  EXPECT_EQ(drained, std::vector<std::string>{"127.0.0.2"});
  const JsonObject again = drain("127.0.0.3");
  EXPECT_TRUE(again.Find("ok")->bool_value());
  EXPECT_NE(again.GetString("message")->find("drained already"), std::string::npos);
  const JsonObject unknown = drain("127.0.0.9");
  EXPECT_FALSE(unknown.Find("ok")->bool_value());
  EXPECT_NE(unknown.GetString("error")->find("no machine of the list is 127.0.0.9; the list has "
                                             "127.0.0.2, 127.0.0.3"),
            std::string::npos)
      << unknown.ToJson();
  EXPECT_EQ(drained.size(), 1u);
  ControlRequests starting({nullptr, nullptr, [&](const std::string&) { FAIL(); }}, "/runs/a", 1);
  EXPECT_FALSE(Parsed(starting.Answer(JsonObject().SetString("command", "drain").SetString(
                                          "machine", "127.0.0.2")))
                   .Find("ok")
                   ->bool_value());
}

TEST(ControlRequests, AnUnknownCommandNamesTheOnesThereAre) {
  ControlRequests requests({nullptr, nullptr, nullptr}, "/runs/a", 42);
  for (const JsonObject& request :
       {JsonObject().SetString("command", "restart"), JsonObject().SetInt("command", 3),
        JsonObject()}) {
    const JsonObject answer = Parsed(requests.Answer(request));
    EXPECT_FALSE(answer.Find("ok")->bool_value());
    EXPECT_NE(answer.GetString("error")->find("(status, stop, drain)"), std::string::npos);
  }
}

}  // namespace
}  // namespace mitra::manager
