// A worker's record (docs/worker-contract.md): the JSON after "@mitra " on a line a worker
// printed, read as the manager reads it. Workers run the user's code, so anything can arrive.
//
// The manager parses the line with JsonObject::Parse and decodes it by its "event": `step` with
// StepRecord::FromJson (the progress line, the ETA, the summary and metrics.jsonl's record),
// `eval` with FormatEvalLine, `describe` in run::DescribeProgram (segments, parameters and
// buffers). Every decoder is run on every record, whatever its event, as a worker's bug could
// send any fields; a "profile" field goes to the planner's profile parsers, as `mitra profile`
// reads `profile_machine` and `profile_comm` records (a parsed one must write back and parse
// again).
//
// Invariants: a parsed record re-serializes and parses to the same fields; a step record has a
// positive whole step; metrics.jsonl's record has no "event" and the shape filled in, and
// state.json gives `mitra status` the same step; a described program has at least one segment
// and named, non-negative parameter shapes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/clock.h"
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

void CheckStep(const JsonObject& record) {
  const std::optional<StepRecord> step = StepRecord::FromJson(record);
  if (!step) return;
  FUZZ_CHECK(step->step >= 1);
  StepStats stats;
  stats.Add(*step, 10.0);
  stats.Add(*step, 10.5);
  FUZZ_CHECK(!FormatProgressLine(*step, 0, std::nullopt).empty());
  FUZZ_CHECK(!FormatProgressLine(*step, 100, stats.EtaSeconds(100)).empty());
  FUZZ_CHECK(!FormatSummary(step->step, 12.0, stats).empty());

  planner::GridPlan plan;
  plan.stages = 2;
  plan.replicas = 2;
  plan.global_batch = 32;
  plan.chunk_size = 8;
  const JsonObject metrics = MetricsRecord(record, plan, 3);
  FUZZ_CHECK(!metrics.Has("event"));
  FUZZ_CHECK(metrics.Has("stages") && metrics.Has("replicas"));
  fuzz::CheckJsonRoundTrip(metrics);

  // state.json carries the last step to `mitra status`.
  StateSnapshot snapshot;
  snapshot.state = "running";
  snapshot.step = step->step;
  snapshot.last_step = *step;
  const JsonObject state = StateRecord(records::Job(), plan, 3, snapshot);
  fuzz::CheckJsonRoundTrip(state);
  const StatusReport report = StatusReport::FromJson(state);
  FUZZ_CHECK(report.step == step->step);
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

void CheckProfile(const JsonObject& record) {
  const JsonValue* profile = record.Find("profile");
  if (profile == nullptr) return;
  if (auto machine = planner::ParseMachineProfile(profile->string_value()); machine.ok()) {
    FUZZ_CHECK(planner::ParseMachineProfile(planner::MachineProfileJson(*machine)).ok());
  }
  if (auto comm = planner::ParseCommProfile(profile->string_value()); comm.ok()) {
    FUZZ_CHECK(planner::ParseCommProfile(planner::CommProfileJson(*comm)).ok());
  }
}

}  // namespace
}  // namespace mitra::manager

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mitra::manager;
  std::string_view line(reinterpret_cast<const char*>(data), size);
  if (line.substr(0, mitra::launcher::kMessagePrefix.size()) == mitra::launcher::kMessagePrefix) {
    line.remove_prefix(mitra::launcher::kMessagePrefix.size());
  }
  const std::string text(line);
  mitra::Result<mitra::JsonObject> record = mitra::JsonObject::Parse(text);
  if (!record.ok()) return 0;
  mitra::fuzz::CheckJsonRoundTrip(*record);
  CheckStep(*record);
  FUZZ_CHECK(!FormatEvalLine(*record).empty());
  CheckDescribe(text);
  CheckProfile(*record);
  return 0;
}
