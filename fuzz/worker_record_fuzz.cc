// A worker's record (docs/worker-contract.md): the JSON after "@mitra " on a line a worker
// printed, read as the manager reads it. Workers run the user's code, so anything can arrive.
//
// The manager reads the line with contract::ParseWorkerMessage and dispatches on its kind:
// `step` goes to StepRecord::Of (the progress line, the ETA, the summary) and MetricsRecord
// (metrics.jsonl), `eval` to FormatEvalLine, `describe` to run::DescribeProgram (segments,
// parameters and buffers), `profile_machine` and `profile_comm` to the planner's profile
// parsers, as `mitra profile` reads them (a parsed one must write back and parse again). Every
// kind is read from every record, whatever its event, as a worker's bug could send any fields.
//
// Invariants: a message read writes back (MessageJson) to text that reads as the same message;
// a step has a positive whole number; metrics.jsonl's record has no "event" and the shape
// filled in, and state.json gives `mitra status` the same step; a described program has at
// least one segment and named, non-negative parameter shapes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "contract/worker_messages.h"
#include "fuzz/fuzz_check.h"
#include "launcher/process_runner.h"
#include "manager/progress.h"
#include "manager/run_records.h"
#include "manager/status_report.h"
#include "planner/profile.h"
#include "run/describe.h"

namespace mitra::manager {
namespace {

// A program that prints `message` as its one record and exits 0, delivered at once.
class OneRecordRunner : public launcher::ProcessRunner {
 public:
  explicit OneRecordRunner(std::string message) : message_(std::move(message)) {}

  Result<std::string> ResolveProgram(const std::string& program, const std::string&) override {
    return program;
  }
  Result<launcher::StartedProcess> Start(const launcher::ProcessSpec&,
                                         launcher::ProcessEventSink sink) override {
    launcher::ProcessEvent record;
    record.kind = launcher::ProcessEvent::Kind::kMessage;
    record.id = 1;
    record.message = message_;
    sink(std::move(record));
    launcher::ProcessEvent exit;
    exit.kind = launcher::ProcessEvent::Kind::kExited;
    exit.id = 1;
    sink(std::move(exit));
    return launcher::StartedProcess{1, 1};
  }
  Status Signal(launcher::ProcessId, int) override { return Status::Ok(); }

 private:
  std::string message_;
};

// The record read as a message of `event`, whatever event it names.
std::optional<contract::ReadMessage> As(const char* event, JsonObject record) {
  record.SetString("event", event);
  Result<contract::ReadMessage> read = contract::ParseWorkerMessage(record.ToJson());
  if (!read.ok()) return std::nullopt;
  return std::move(read).value();
}

// The message's JSON, whatever its kind.
JsonObject JsonOf(const contract::ReadMessage& read) {
  return std::visit(
      [&](const auto& m) -> JsonObject {
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, contract::message::Unknown>) {
          return JsonObject(read.more).SetString("event", m.event);
        } else {
          return contract::MessageJson(m, read.more);
        }
      },
      read.message);
}

void CheckRoundTrip(const contract::ReadMessage& read) {
  const JsonObject written = JsonOf(read);
  Result<contract::ReadMessage> again = contract::ParseWorkerMessage(written.ToJson());
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(contract::EventOf(again->message) == contract::EventOf(read.message));
  FUZZ_CHECK(fuzz::SameFields(JsonOf(*again), written));
}

void CheckStep(const JsonObject& record) {
  const std::optional<contract::ReadMessage> read = As(contract::message::Step::kEvent, record);
  if (!read) return;
  const auto& message = std::get<contract::message::Step>(read->message);
  const StepRecord step = StepRecord::Of(message);
  FUZZ_CHECK(step.step >= 1);
  StepStats stats;
  stats.Add(step, 10.0);
  stats.Add(step, 10.5);
  FUZZ_CHECK(!FormatProgressLine(step, 0, std::nullopt).empty());
  FUZZ_CHECK(!FormatProgressLine(step, 100, stats.EtaSeconds(100)).empty());
  FUZZ_CHECK(!FormatSummary(step.step, 12.0, stats).empty());

  planner::GridPlan plan;
  plan.stages = 2;
  plan.replicas = 2;
  plan.global_batch = 32;
  plan.chunk_size = 8;
  const JsonObject metrics = MetricsRecord(message, read->more, plan, 3);
  FUZZ_CHECK(!metrics.Has("event"));
  FUZZ_CHECK(metrics.Has("stages") && metrics.Has("replicas"));
  fuzz::CheckJsonRoundTrip(metrics);

  // state.json carries the last step to `mitra status`.
  StateSnapshot snapshot;
  snapshot.state = "running";
  snapshot.step = step.step;
  snapshot.last_step = step;
  const JsonObject state = StateRecord(records::Job(), plan, 3, snapshot);
  fuzz::CheckJsonRoundTrip(state);
  const StatusReport report = StatusReport::FromJson(state);
  FUZZ_CHECK(report.step == step.step);
}

void CheckDescribe(const std::string& text) {
  OneRecordRunner runner(text);
  SystemClock clock;
  launcher::ProcessSpec spec;
  spec.program = "program";
  Result<run::ProgramDescription> description = run::DescribeProgram(runner, spec, clock, 5.0);
  if (!description.ok()) {
    FUZZ_CHECK(!description.status().message().empty());
    return;
  }
  FUZZ_CHECK(description->segments >= 1);
  for (const run::NamedShapes* shapes : {&description->parameters, &description->buffers}) {
    for (const auto& [name, shape] : *shapes) {
      FUZZ_CHECK(!name.empty());
      for (const int64_t d : shape) FUZZ_CHECK(d >= 0);
    }
  }
}

void CheckEval(const JsonObject& record) {
  const std::optional<contract::ReadMessage> read = As(contract::message::Eval::kEvent, record);
  if (!read) return;
  FUZZ_CHECK(!FormatEvalLine(std::get<contract::message::Eval>(read->message), read->more).empty());
}

void CheckProfile(const JsonObject& record) {
  using contract::message::ProfileComm;
  using contract::message::ProfileMachine;
  if (const auto read = As(ProfileMachine::kEvent, record)) {
    const std::string& text = std::get<ProfileMachine>(read->message).profile.text;
    if (auto machine = planner::ParseMachineProfile(text); machine.ok()) {
      FUZZ_CHECK(planner::ParseMachineProfile(planner::MachineProfileJson(*machine)).ok());
    }
  }
  if (const auto read = As(ProfileComm::kEvent, record)) {
    const std::string& text = std::get<ProfileComm>(read->message).profile.text;
    if (auto comm = planner::ParseCommProfile(text); comm.ok()) {
      FUZZ_CHECK(planner::ParseCommProfile(planner::CommProfileJson(*comm)).ok());
    }
  }
}

}  // namespace
}  // namespace mitra::manager

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mitra::manager;
  std::string_view line(reinterpret_cast<const char*>(data), size);
  if (line.substr(0, mitra::contract::kMessagePrefix.size()) == mitra::contract::kMessagePrefix) {
    line.remove_prefix(mitra::contract::kMessagePrefix.size());
  }
  const std::string text(line);
  if (auto read = mitra::contract::ParseWorkerMessage(text); read.ok()) CheckRoundTrip(*read);
  mitra::Result<mitra::JsonObject> record = mitra::JsonObject::Parse(text);
  if (!record.ok()) return 0;
  mitra::fuzz::CheckJsonRoundTrip(*record);
  CheckStep(*record);
  CheckEval(*record);
  CheckDescribe(text);
  CheckProfile(*record);
  return 0;
}
