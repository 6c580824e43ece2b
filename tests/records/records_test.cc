// The run directory's schema (records/records.h): every kind writes and reads back the same
// values, its field names are the ones the docs list, what the manager's writers produce reads
// back through it, and the reader tolerates what a crash leaves.
#include "records/records.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "contract/worker_messages.h"
#include "manager/narration.h"
#include "manager/run_records.h"
#include "manager/status_report.h"
#include "records/reader.h"
#include "tests/common/filled.h"
#include "tests/common/memory_file_system.h"

namespace mitra::records {
namespace {

using testing::Filled;

template <class Record>
void ExpectRoundTrip() {
  const Record written = Filled<Record>();
  const JsonObject json = ToJson(written);
  const Record read = FromJson<Record>(json);
  EXPECT_EQ(ToJson(read).ToJson(), json.ToJson());
  // Through text, as a reader of the file sees it.
  Result<JsonObject> parsed = JsonObject::Parse(json.ToJson());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(ToJson(FromJson<Record>(*parsed)).ToJson(), json.ToJson());
  EXPECT_EQ(json.size(), FieldNames<Record>().size()) << "a field name is used twice";
}

TEST(Records, EveryKindReadsBackWhatItWrote) {
  ExpectRoundTrip<Start>();
  ExpectRoundTrip<Launch>();
  ExpectRoundTrip<Settings>();
  ExpectRoundTrip<Ready>();
  ExpectRoundTrip<Morph>();
  ExpectRoundTrip<Failure>();
  ExpectRoundTrip<FirstStep>();
  ExpectRoundTrip<Checkpoint>();
  ExpectRoundTrip<Straggler>();
  ExpectRoundTrip<End>();
  ExpectRoundTrip<StepMetrics>();
  ExpectRoundTrip<EvalMetrics>();
  ExpectRoundTrip<RankSteps>();
  ExpectRoundTrip<State>();
}

// The guard: the round trip sees a field the reader does not take back.
TEST(Records, TheRoundTripSeesAFieldThatIsNotReadBack) {
  JsonObject json = ToJson(Filled<Ready>());
  json.SetNumber("rendezvous_seconds", 3);  // a writer that renamed the field
  json.Erase("rendezvous_s");
  EXPECT_NE(ToJson(FromJson<Ready>(json)).ToJson(), json.ToJson());
}

TEST(Records, MissingFieldsAndFieldsOfAnotherTypeKeepTheirDefaults) {
  Result<JsonObject> json = JsonObject::Parse(
      R"({"kind":7,"step":"twelve","kept":3,"shape":"2 x 1","pids":[1,"x"],"stop_s":null})");
  ASSERT_TRUE(json.ok());
  const FirstStep first = FromJson<FirstStep>(*json);
  EXPECT_EQ(first.kind, "");
  EXPECT_EQ(first.step, 0);
  EXPECT_EQ(first.kept, 3);
  EXPECT_EQ(first.shape, "2 x 1");
  EXPECT_EQ(first.stop_s, 0);
  const Launch launch = FromJson<Launch>(*json);
  EXPECT_TRUE(launch.pids.empty()) << "an array with a non-integer is not half read";
  EXPECT_FALSE(launch.schedule.has_value());
}

TEST(Records, OptionalFieldsAreWrittenOnlyWhenSet) {
  End end;
  end.step = 3;
  EXPECT_EQ(ToJson(end).ToJson(), R"({"step":3,"wall_s":0})");
  end.reason = "x";
  EXPECT_EQ(ToJson(end).GetString("reason"), "x");
}

TEST(Records, SetFieldsKeepsTheWorkersOwnFields) {
  JsonObject worker;
  worker.SetString("text", "1f1b").SetString("optimizer", "adamw");
  Settings settings = FromJson<Settings>(worker);
  settings.generation = 4;
  SetFields(worker, settings);
  EXPECT_EQ(worker.GetString("optimizer"), "adamw");
  EXPECT_EQ(worker.GetNumber("generation"), 4);
  EXPECT_EQ(worker.GetString("text"), "1f1b");
}

// ---- The docs list every field ---------------------------------------------------------------

std::string ReadDoc(const std::string& name) {
  std::ifstream in(std::string(MITRA_SOURCE_DIR) + "/docs/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The rows of the docs' event tables whose first cell names `event`, in both pages.
std::string EventRows(const std::string& event) {
  std::string rows;
  for (const std::string page : {"mitra-run.md", "manager.md"}) {
    std::istringstream in(ReadDoc(page));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("| ", 0) != 0) continue;
      const std::string first = line.substr(0, line.find(" |", 2));
      if (first.find("`" + event + "`") != std::string::npos) rows += line + "\n";
    }
  }
  return rows;
}

// The text of the section of docs/mitra-run.md under `heading` (up to the next heading).
std::string Section(const std::string& heading) {
  const std::string doc = ReadDoc("mitra-run.md");
  const size_t begin = doc.find("\n" + heading + "\n");
  if (begin == std::string::npos) return "";
  return doc.substr(begin, doc.find("\n#", begin + 1) - begin);
}

// Fields every record carries, documented once above the tables.
bool Common(const std::string& name) { return name == "time" || name == "generation"; }

template <class Record>
void ExpectDocumented(const std::string& text, const std::string& what) {
  ASSERT_FALSE(text.empty()) << what << " is not in the docs";
  for (const std::string& name : FieldNames<Record>()) {
    if (Common(name)) continue;
    EXPECT_NE(text.find("`" + name + "`"), std::string::npos)
        << what << ": the field `" << name << "` is not in the docs";
  }
}

TEST(Records, TheDocsListEveryFieldOfEveryKind) {
  ExpectDocumented<Start>(EventRows(Start::kEvent), "start");
  ExpectDocumented<Launch>(EventRows(Launch::kEvent), "launch");
  ExpectDocumented<Ready>(EventRows(Ready::kEvent), "ready");
  ExpectDocumented<Morph>(EventRows(Morph::kEvent), "morph");
  ExpectDocumented<Failure>(EventRows(Failure::kEvent), "failure");
  ExpectDocumented<FirstStep>(EventRows(FirstStep::kEvent), "first_step");
  ExpectDocumented<Straggler>(EventRows(Straggler::kEvent), "straggler");
  ExpectDocumented<End>(EventRows(End::kDone), "done");
  ExpectDocumented<Settings>(EventRows(Settings::kEvent), "settings");
  ExpectDocumented<Checkpoint>(EventRows(Checkpoint::kEvent), "checkpoint");
  ExpectDocumented<StepMetrics>(Section("### metrics.jsonl"), "metrics.jsonl");
  ExpectDocumented<RankSteps>(Section("### rank_steps.jsonl"), "rank_steps.jsonl");
  ExpectDocumented<State>(Section("### state.json"), "state.json");
}

// The guard: a kind with a field the docs do not list fails the check.
struct ReadyRenamed {
  double rendezvous_seconds = 0;
  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("rendezvous_seconds", r.rendezvous_seconds);
  }
};

TEST(Records, AnUndocumentedFieldFailsTheDocsCheck) {
  EXPECT_NONFATAL_FAILURE(ExpectDocumented<ReadyRenamed>(EventRows("ready"), "ready"),
                          "the field `rendezvous_seconds` is not in the docs");
  ExpectDocumented<Ready>(EventRows("ready"), "ready");  // and the real one passes
}

// ---- What the manager writes reads back through the schema -------------------------------------

planner::GridPlan TwoByTwo() {
  planner::GridRequest request;
  request.slots_per_machine = {2, 2};
  request.stages = 2;
  request.segments = 4;
  request.global_batch = 8;
  Result<planner::GridPlan> plan = planner::PlanGrid(request);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return *plan;
}

TEST(Records, TheManagersStateRecordReadsBack) {
  manager::StateSnapshot snapshot;
  snapshot.state = "running";
  snapshot.step = 12;
  snapshot.max_steps = 100;
  snapshot.last_step = manager::StepRecord{12, 2.5, 40, 0, 0.2};
  snapshot.ready_workers = 4;
  snapshot.running_workers = 4;
  snapshot.pids = {11, 12, 13, 14};
  Job job;
  job.manager_pid = 99;
  job.run_dir = "/runs/a";
  const JsonObject json = manager::StateRecord(job, TwoByTwo(), 3, snapshot);

  const State state = FromJson<State>(json);
  EXPECT_EQ(state.state, "running");
  EXPECT_EQ(state.step, 12);
  EXPECT_EQ(state.max_steps, 100);
  EXPECT_EQ(state.shape.generation, 3);
  EXPECT_EQ(state.shape.stages, 2);
  EXPECT_EQ(state.shape.replicas, 2);
  EXPECT_EQ(state.loss, 2.5);
  EXPECT_EQ(state.ready_workers, 4);
  EXPECT_EQ(state.pids, (std::vector<int64_t>{11, 12, 13, 14}));
  // `mitra status` reads the same file when no manager runs.
  const manager::StatusReport status = manager::StatusReport::FromJson(json);
  EXPECT_EQ(status.state, "running");
  EXPECT_EQ(status.step, 12);
  EXPECT_EQ(status.generation, 3);
  EXPECT_EQ(status.stages, 2);
  EXPECT_EQ(status.loss, 2.5);
  EXPECT_EQ(status.manager_pid, 99);
  EXPECT_EQ(status.run_dir, "/runs/a");
}

TEST(Records, TheManagersLaunchAndMetricsRecordsReadBack) {
  const Launch launch = FromJson<Launch>(
      ToJson(manager::LaunchRecord(TwoByTwo(), 2, "train", {5, 6, 7, 8}, 0.25)));
  EXPECT_EQ(launch.shape.generation, 2);
  EXPECT_EQ(launch.shape.world_size, 4);
  EXPECT_EQ(launch.pids, (std::vector<int64_t>{5, 6, 7, 8}));
  EXPECT_EQ(launch.launch_s, 0.25);

  // The worker's record, without the shape, with a field of the program's own.
  Result<contract::ReadMessage> worker_step = contract::ParseWorkerMessage(
      R"({"event":"step","step":7,"loss":1.5,"samples":8,"samples_per_s":80,"step_time_s":0.1,)"
      R"("lr":0.01,"tokens_seen":4096})");
  ASSERT_TRUE(worker_step.ok()) << worker_step.status().message();
  const JsonObject metrics = manager::MetricsRecord(
      std::get<contract::message::Step>(worker_step->message), worker_step->more, TwoByTwo(), 2);
  ASSERT_TRUE(StepMetrics::IsStep(metrics));
  const StepMetrics step = FromJson<StepMetrics>(metrics);
  EXPECT_EQ(step.step, 7);
  EXPECT_EQ(step.loss, 1.5);
  EXPECT_EQ(step.samples, 8);
  EXPECT_EQ(step.stages, 2);
  EXPECT_EQ(step.replicas, 2);
  EXPECT_EQ(step.generation, 2);
  EXPECT_FALSE(metrics.Has("event"));
  EXPECT_EQ(metrics.GetNumber("lr"), 0.01);
  EXPECT_EQ(metrics.GetNumber("tokens_seen"), 4096) << "the program's own fields pass through";
}

// A diverged loss is NaN, which JSON writes as null: metrics.jsonl says so, not 0.
TEST(Records, ANullLossPassesThroughToTheMetrics) {
  Result<contract::ReadMessage> worker_step =
      contract::ParseWorkerMessage(R"({"event":"step","step":3,"loss":null,"samples":8})");
  ASSERT_TRUE(worker_step.ok());
  const JsonObject metrics = manager::MetricsRecord(
      std::get<contract::message::Step>(worker_step->message), worker_step->more, TwoByTwo(), 1);
  ASSERT_TRUE(StepMetrics::IsStep(metrics));
  EXPECT_TRUE(metrics.Find("loss")->is_null()) << metrics.ToJson();
}

TEST(Records, NarratedRecordsReadBack) {
  manager::TrainingAgainFact again;
  again.kind = "morph";
  again.step = 34;
  again.shape = "2 x 1";
  again.kept = 2;
  again.downtime_s = 1.0004;
  again.stop_s = 0.4;
  again.first_step_s = 0.5;
  manager::Narration told = manager::Narrate(again);
  ASSERT_EQ(told.event, FirstStep::kEvent);
  const FirstStep first = FromJson<FirstStep>(told.fields);
  EXPECT_EQ(first.kind, "morph");
  EXPECT_EQ(first.step, 34);
  EXPECT_EQ(first.shape, "2 x 1");
  EXPECT_EQ(first.kept, 2);
  EXPECT_EQ(first.downtime_s, 1.0);
  EXPECT_EQ(first.stop_s, 0.4);
  EXPECT_EQ(first.first_step_s, 0.5);

  manager::FailureFact failed;
  failed.reason = "rank 1 exited with code 1";
  failed.step = 9;
  failed.where = manager::FailureFact::Where{1, 4242, "node2"};
  told = manager::Narrate(failed);
  ASSERT_EQ(told.event, Failure::kEvent);
  const Failure failure = FromJson<Failure>(told.fields);
  EXPECT_EQ(failure.reason, failed.reason);
  EXPECT_EQ(failure.step, 9);
  EXPECT_EQ(failure.rank, 1);
  EXPECT_EQ(failure.pid, 4242);
  EXPECT_EQ(failure.machine, "node2");

  manager::MorphFact morph;
  morph.reason = "machine list changed";
  morph.from = "2 x 2";
  morph.step = 20;
  told = manager::Narrate(morph);
  ASSERT_EQ(told.event, Morph::kEvent);
  EXPECT_EQ(FromJson<Morph>(told.fields).from, "2 x 2");
  EXPECT_EQ(FromJson<Morph>(told.fields).step, 20);
}

// ---- The reader ---------------------------------------------------------------------------------

TEST(RunDirReader, SkipsWhatACrashLeftAndCountsIt) {
  testing::MemoryFileSystem fs;
  fs.AddFile("/run/events.jsonl",
             "{\"time\":1,\"event\":\"ready\",\"generation\":0,\"rendezvous_s\":0.5}\n"
             "not json\n"
             "\n"
             "{\"time\":2,\"event\":\"morph\",\"reason\":\"x\"}\n"
             "{\"time\":3,\"event\":\"mor");  // being written
  const RunDirReader reader(&fs, "/run");
  int skipped = 0;
  const std::vector<EventRecord> events = reader.Events(&skipped);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(skipped, 1);
  EXPECT_TRUE(events[0].Is<Ready>());
  EXPECT_EQ(events[0].time, 1);
  EXPECT_EQ(events[0].As<Ready>().rendezvous_s, 0.5);
  EXPECT_TRUE(events[1].Is<Morph>());
  EXPECT_EQ(events[1].As<Morph>().reason, "x");
  EXPECT_TRUE(reader.HasRecords());
  EXPECT_TRUE(reader.Metrics().records.empty()) << "a missing file holds no records";
  EXPECT_FALSE(reader.ReadState().has_value());
}

TEST(RunDirReader, ReadsStateAndRankSteps) {
  testing::MemoryFileSystem fs;
  fs.AddFile("/run/state.json", "{\n  \"state\": \"done\",\n  \"step\": 5,\n  \"stages\": 2\n}\n");
  fs.AddFile("/run/rank_steps.jsonl",
             "{\"time\":4,\"generation\":1,\"rank\":3,\"stage\":1,\"step\":5,\"steps\":2,"
             "\"compute_s\":0.1,\"wait_s\":0.02}\n");
  const RunDirReader reader(&fs, "/run");
  const std::optional<State> state = reader.ReadState();
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->state, "done");
  EXPECT_TRUE(State::IsEnd(state->state));
  EXPECT_EQ(state->step, 5);
  EXPECT_EQ(state->shape.stages, 2);
  const std::vector<RankSteps> steps = reader.RankStepRecords();
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].rank, 3);
  EXPECT_EQ(steps[0].wait_s, 0.02);
  EXPECT_FALSE(RunDirReader(&fs, "/elsewhere").HasRecords());
}

TEST(StepTraces, OneNameForTheFile) {
  EXPECT_EQ(StepTraceFile(3, 1), "logs/gen-3/rank-1.trace.json");
  EXPECT_EQ(GenerationLogDir(3) + "/" + StepTraceName(1), StepTraceFile(3, 1));
}

TEST(CompleteLines, TheLastLineWithoutItsNewlineIsBeingWritten) {
  EXPECT_EQ(CompleteLines("a\nb\nc"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(CompleteLines("a\n\n"), (std::vector<std::string>{"a", ""}));
  EXPECT_TRUE(CompleteLines("half").empty());
  EXPECT_TRUE(CompleteLines("").empty());
}

}  // namespace
}  // namespace mitra::records
