// RunMetrics fed the records the manager writes, read back in the Prometheus text format that
// a scrape of /metrics gets: no HTTP, no clock. The decision records are made by Narrate(), as
// the controller makes them, so their fields are the real ones.
#include "report/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "common/strings.h"
#include "manager/narration.h"
#include "records/records.h"

namespace mitra::report {
namespace {

// An events.jsonl record as the journal writes it.
JsonObject Record(const std::string& event, const JsonObject& fields) {
  JsonObject record;
  record.SetNumber("time", 1764000000.0).SetString("event", event);
  for (const auto& [key, value] : fields.fields()) record.Set(key, value);
  return record;
}

JsonObject Told(const manager::Fact& fact, int64_t generation) {
  manager::Narration told = manager::Narrate(fact);
  return Record(told.event, told.fields.SetInt("generation", generation));
}

JsonObject Launch(int64_t generation, int stages, int replicas) {
  records::Launch launch;
  launch.shape.generation = generation;
  launch.shape.stages = stages;
  launch.shape.replicas = replicas;
  launch.shape.world_size = stages * replicas;
  return Record(records::Launch::kEvent, records::ToJson(launch));
}

JsonObject Step(int64_t step, double loss, double samples_per_s) {
  records::StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.samples = 16;
  m.samples_per_s = samples_per_s;
  m.stages = 2;
  m.replicas = 1;
  m.time = 1764000000.0;
  return records::ToJson(m);
}

JsonObject Checkpoint(int64_t step, double blocked_s) {
  records::Checkpoint c;
  c.step = step;
  c.blocked_s = blocked_s;
  c.total_s = 0.5;
  return Record(records::Checkpoint::kEvent, records::ToJson(c));
}

// state.json as the manager writes it.
JsonObject State(const std::string& name, int64_t step, int64_t ready_workers) {
  records::State state;
  state.state = name;
  state.shape.generation = 3;
  state.shape.stages = 2;
  state.shape.replicas = 2;
  state.shape.world_size = 4;
  state.step = step;
  state.ready_workers = ready_workers;
  return records::ToJson(state);
}

// The samples of a scrape: "name{labels}" -> value; HELP and TYPE lines by family name.
struct Scrape {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> help;
  std::map<std::string, std::string> type;

  explicit Scrape(const std::string& text) {
    for (const std::string_view view : SplitLines(text)) {
      const std::string line(view);
      if (line.empty()) continue;
      std::istringstream in(line);
      if (StartsWith(line, "# HELP ") || StartsWith(line, "# TYPE ")) {
        std::string hash, kind, name, rest;
        in >> hash >> kind >> name;
        std::getline(in, rest);
        (kind == "HELP" ? help : type)[name] = rest.empty() ? rest : rest.substr(1);
        continue;
      }
      const size_t space = line.rfind(' ');
      samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
    }
  }
  // The sample's value; nullopt when the scrape has no such sample.
  std::optional<double> operator[](const std::string& sample) const {
    const auto it = samples.find(sample);
    return it == samples.end() ? std::nullopt : std::optional<double>(it->second);
  }
};

class RunMetricsTest : public ::testing::Test {
 protected:
  Scrape Read() const { return Scrape(metrics_.Text()); }
  RunMetrics metrics_;
};

TEST_F(RunMetricsTest, EveryFamilyIsThereFromTheStartWithItsMeaning) {
  const Scrape scrape = Read();
  const std::map<std::string, std::string> families = {
      {"mitra_step", "gauge"},
      {"mitra_loss", "gauge"},
      {"mitra_samples_per_second", "gauge"},
      {"mitra_generation", "gauge"},
      {"mitra_world_size", "gauge"},
      {"mitra_stages", "gauge"},
      {"mitra_replicas", "gauge"},
      {"mitra_ready_workers", "gauge"},
      {"mitra_state", "gauge"},
      {"mitra_machines", "gauge"},
      {"mitra_last_checkpoint_step", "gauge"},
      {"mitra_failures_total", "counter"},
      {"mitra_morphs_total", "counter"},
      {"mitra_restarts_total", "counter"},
      {"mitra_downtime_seconds_total", "counter"},
      {"mitra_checkpoints_total", "counter"},
      {"mitra_checkpoint_blocked_seconds_total", "counter"},
      {"mitra_stragglers_total", "counter"},
  };
  for (const auto& [name, type] : families) {
    EXPECT_EQ(scrape.type.count(name), 1u) << name << "\n" << metrics_.Text();
    EXPECT_EQ(scrape.type.count(name) ? scrape.type.at(name) : "", type) << name;
    EXPECT_GT(scrape.help.count(name) ? scrape.help.at(name).size() : 0, 20u)
        << name << " has no HELP that says what it means";
  }
  for (const char* sample :
       {"mitra_step", "mitra_failures_total", "mitra_morphs_total",
        "mitra_downtime_seconds_total{kind=\"morph\"}",
        "mitra_downtime_seconds_total{kind=\"recovery\"}", "mitra_state{state=\"waiting\"}",
        "mitra_machines{state=\"in_use\"}"}) {
    EXPECT_EQ(scrape[sample], 0) << sample << "\n" << metrics_.Text();
  }
  // Every machine state status can show is a member from the start, a query for one finding 0.
  for (const char* state : {"in_use", "idle", "checking", "failed", "drained", "removed"}) {
    const std::string sample = std::string("mitra_machines{state=\"") + state + "\"}";
    EXPECT_EQ(scrape.samples.count(sample), 1u) << sample << "\n" << metrics_.Text();
  }
}

TEST_F(RunMetricsTest, AStepRecordSetsStepLossAndThroughputAndAnEvaluationDoesNot) {
  metrics_.OnStep(Step(12, 2.5, 640));
  auto with_tokens = records::FromJson<records::StepMetrics>(Step(13, 2.25, 600));
  with_tokens.tokens_per_s = 76800;
  metrics_.OnStep(records::ToJson(with_tokens));
  // An evaluation record (metrics.jsonl's eval_ fields) is no training step: nothing moves.
  records::EvalMetrics eval;
  eval.step = 99;
  eval.eval_loss = 9.5;
  metrics_.OnStep(records::ToJson(eval));
  const Scrape scrape = Read();
  EXPECT_EQ(scrape["mitra_step"], 13);
  EXPECT_EQ(scrape["mitra_loss"], 2.25);
  EXPECT_EQ(scrape["mitra_samples_per_second"], 600);
  EXPECT_EQ(scrape["mitra_tokens_per_second"], 76800);
}

TEST_F(RunMetricsTest, ALaunchAndTheStateSetTheShapeAndWaitingHasNone) {
  metrics_.OnEvent(Launch(3, 2, 2));
  Scrape scrape = Read();
  EXPECT_EQ(scrape["mitra_generation"], 3);
  EXPECT_EQ(scrape["mitra_world_size"], 4);
  EXPECT_EQ(scrape["mitra_stages"], 2);
  EXPECT_EQ(scrape["mitra_replicas"], 2);

  metrics_.OnState(State("running", 40, 3));
  scrape = Read();
  EXPECT_EQ(scrape["mitra_ready_workers"], 3);
  EXPECT_EQ(scrape["mitra_step"], 40);
  EXPECT_EQ(scrape["mitra_state{state=\"running\"}"], 1);
  EXPECT_EQ(scrape["mitra_state{state=\"waiting\"}"], 0);

  // Too few slots: state.json keeps the last shape, but none runs.
  metrics_.OnState(State("waiting", 40, 0));
  scrape = Read();
  EXPECT_EQ(scrape["mitra_world_size"], 0);
  EXPECT_EQ(scrape["mitra_stages"], 0);
  EXPECT_EQ(scrape["mitra_generation"], 3);
  EXPECT_EQ(scrape["mitra_state{state=\"running\"}"], 0);
  EXPECT_EQ(scrape["mitra_state{state=\"waiting\"}"], 1);
}

TEST_F(RunMetricsTest, AMorphIsCountedWithItsDowntimeAndIsNoRestart) {
  metrics_.OnEvent(Launch(0, 2, 2));
  metrics_.OnEvent(
      Told(manager::MorphFact{"machine list changed: localhost 4 -> 2 slots", "2 x 2", 116, 4}, 0));
  metrics_.OnEvent(Launch(1, 2, 1));
  metrics_.OnEvent(Told(manager::TrainingAgainFact{"morph", 117, "2 x 1", 0, 2, 0.9, 0.3, 0, 0.4, 0, 0.2}, 1));
  const Scrape scrape = Read();
  EXPECT_EQ(scrape["mitra_morphs_total"], 1);
  EXPECT_EQ(scrape["mitra_restarts_total"], 0);
  EXPECT_EQ(scrape["mitra_failures_total"], 0);
  EXPECT_EQ(scrape["mitra_downtime_seconds_total{kind=\"morph\"}"], 0.9);
  EXPECT_EQ(scrape["mitra_downtime_seconds_total{kind=\"recovery\"}"], 0);
  EXPECT_EQ(scrape["mitra_generation"], 1);
  EXPECT_EQ(scrape["mitra_world_size"], 2);
}

TEST_F(RunMetricsTest, AFailureItsRestartAndTheRecoverysDowntimeAddUp) {
  metrics_.OnEvent(Launch(0, 2, 1));
  manager::FailureFact failure;
  failure.reason = "rank 1 (pid 26177) was killed by signal SIGKILL after step 174";
  failure.step = 174;
  failure.where = manager::FailureFact::Where{1, 26177, "localhost"};
  metrics_.OnEvent(Told(failure, 0));
  EXPECT_EQ(Read()["mitra_restarts_total"], 0);  // counted when the workers are relaunched
  metrics_.OnEvent(Launch(1, 2, 1));
  metrics_.OnEvent(Told(manager::TrainingAgainFact{"recovery", 171, "2 x 1", 0, 2, 1.6, 0, 0, 1.2, 0, 0.4}, 1));
  // A second one, and a morph between: only the failure's launch is a restart.
  metrics_.OnEvent(Told(failure, 1));
  metrics_.OnEvent(Launch(2, 2, 1));
  metrics_.OnEvent(Told(manager::TrainingAgainFact{"recovery", 180, "2 x 1", 0, 2, 2.25, 0.25, 0, 1.5, 0, 0.5}, 2));
  metrics_.OnEvent(Told(manager::MorphFact{"127.0.0.3 joined", "2 x 1", 190, 2}, 2));
  metrics_.OnEvent(Launch(3, 2, 2));

  const Scrape scrape = Read();
  EXPECT_EQ(scrape["mitra_failures_total"], 2);
  EXPECT_EQ(scrape["mitra_restarts_total"], 2);
  EXPECT_EQ(scrape["mitra_morphs_total"], 1);
  EXPECT_DOUBLE_EQ(scrape["mitra_downtime_seconds_total{kind=\"recovery\"}"].value_or(-1), 3.85);
  EXPECT_EQ(scrape["mitra_generation"], 3);
}

TEST_F(RunMetricsTest, AFailureAfterTrainingIsAFailureButNoRestart) {
  manager::FailureFact failure;
  failure.reason = "rank 0 exited with code 3";
  failure.step = 300;
  failure.after_training = true;
  metrics_.OnEvent(Told(failure, 0));
  const Scrape scrape = Read();
  EXPECT_EQ(scrape["mitra_failures_total"], 1);
  EXPECT_EQ(scrape["mitra_restarts_total"], 0);
}

TEST_F(RunMetricsTest, CheckpointsAreCountedWithTheTimeTheyBlockedTraining) {
  metrics_.OnEvent(Checkpoint(100, 0.25));
  metrics_.OnEvent(Checkpoint(200, 0.5));
  metrics_.OnEvent(Record("checkpoint_failed",
                          JsonObject().SetInt("step", 300).SetString("error", "disk full")));
  const Scrape scrape = Read();
  EXPECT_EQ(scrape["mitra_checkpoints_total"], 2);
  EXPECT_EQ(scrape["mitra_checkpoint_blocked_seconds_total"], 0.75);
  EXPECT_EQ(scrape["mitra_last_checkpoint_step"], 200);
}

TEST_F(RunMetricsTest, StragglerEventsAreCountedByName) {
  for (int i = 0; i < 2; ++i) {
    metrics_.OnEvent(
        Record("straggler", JsonObject().SetInt("rank", 3).SetString("machine", "10.0.0.7")));
  }
  EXPECT_EQ(Read()["mitra_stragglers_total"], 2);
}

TEST_F(RunMetricsTest, MachinesAreCountedByState) {
  std::vector<manager::MachineStatus> machines(4);
  machines[0].state = "in use";
  machines[1].state = "in use";
  machines[2].state = "failed";
  machines[3].state = "idle";
  metrics_.OnMachines(machines);
  Scrape scrape = Read();
  EXPECT_EQ(scrape["mitra_machines{state=\"in_use\"}"], 2);
  EXPECT_EQ(scrape["mitra_machines{state=\"failed\"}"], 1);
  EXPECT_EQ(scrape["mitra_machines{state=\"idle\"}"], 1);

  machines.resize(1);  // the list shrank
  metrics_.OnMachines(machines);
  scrape = Read();
  EXPECT_EQ(scrape["mitra_machines{state=\"in_use\"}"], 1);
  EXPECT_EQ(scrape["mitra_machines{state=\"failed\"}"], 0);
}

}  // namespace
}  // namespace mitra::report
