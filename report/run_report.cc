#include "report/run_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/strings.h"

namespace mitra::report {
namespace {

using nlohmann::json;

double Num(const json& record, const char* key, double fallback = 0) {
  const auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : fallback;
}

int64_t Int(const json& record, const char* key, int64_t fallback = 0) {
  const auto it = record.find(key);
  if (it == record.end() || !it->is_number()) return fallback;
  if (it->is_number_integer()) return it->get<int64_t>();
  // A float out of int64's range would be undefined behaviour to convert.
  const double value = it->get<double>();
  return value > -9e18 && value < 9e18 ? static_cast<int64_t>(value) : fallback;
}

std::string Text(const json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_string() ? it->get<std::string>() : "";
}

// The objects of a .jsonl file; a missing file has none.
std::vector<json> ReadRecords(FileSystem& fs, const std::string& path, int* skipped) {
  std::vector<json> records;
  Result<std::string> text = fs.ReadFile(path);
  if (!text.ok()) return records;
  for (const std::string& line : CompleteLines(*text)) {
    if (Trim(line).empty()) continue;
    json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object()) {
      ++*skipped;
      continue;
    }
    records.push_back(std::move(record));
  }
  return records;
}

GenerationSpan* FindGeneration(RunReport& report, int64_t generation) {
  for (auto it = report.generations.rbegin(); it != report.generations.rend(); ++it) {
    if (it->generation == generation) return &*it;
  }
  return nullptr;
}

void ReadMetrics(FileSystem& fs, RunReport& report) {
  for (const json& r : ReadRecords(fs, JoinPath(report.run_dir, "metrics.jsonl"),
                                   &report.skipped_lines)) {
    const double time = Num(r, "time");
    report.last_time = std::max(report.last_time, time);
    if (r.contains("eval_loss")) {
      EvalPoint e{Int(r, "step"), time, Num(r, "eval_loss"), std::nullopt};
      if (r.contains("eval_accuracy")) e.accuracy = Num(r, "eval_accuracy");
      report.evals.push_back(e);
      continue;
    }
    if (!r.contains("loss")) continue;
    StepPoint p;
    p.step = Int(r, "step");
    p.generation = Int(r, "generation");
    p.time = time;
    p.loss = Num(r, "loss");
    p.samples = Int(r, "samples");
    p.samples_per_s = Num(r, "samples_per_s");
    p.tokens_per_s = Num(r, "tokens_per_s");
    p.step_time_s = Num(r, "step_time_s");
    if (p.tokens_per_s > 0) report.tokens = true;
    report.steps.push_back(p);
    if (GenerationSpan* g = FindGeneration(report, p.generation)) {
      if (g->first_step == 0) g->first_step = p.step;
      g->last_step = p.step;
      g->ended = std::max(g->ended, time);
    }
  }
}

void ReadEvent(const json& r, RunReport& report, std::string* pending_cause) {
  const std::string event = Text(r, "event");
  const double time = Num(r, "time");
  const int64_t generation = Int(r, "generation");
  if (event == "start") {
    if (report.managers++ == 0) report.started = time;
    report.program = Text(r, "program");
    if (Int(r, "tokens_per_sample") > 0) report.tokens = true;
  } else if (event == "launch") {
    GenerationSpan g;
    g.generation = generation;
    g.stages = static_cast<int>(Int(r, "stages"));
    g.replicas = static_cast<int>(Int(r, "replicas"));
    g.world_size = static_cast<int>(Int(r, "world_size"));
    g.resume_step = Int(r, "resume_step");
    g.launched = g.ended = time;
    report.generations.push_back(g);
  } else if (event == "ready") {
    if (GenerationSpan* g = FindGeneration(report, generation)) g->ready = time;
  } else if (event == "morph") {
    ++report.morphs;
    *pending_cause = Text(r, "reason");
  } else if (event == "failure" || event == "failure_after_training") {
    report.failures.push_back(Failure{time, generation, Int(r, "step"),
                                      static_cast<int>(Int(r, "rank", -1)), Text(r, "machine"),
                                      Text(r, "reason")});
    *pending_cause = Text(r, "reason");
  } else if (event == "first_step") {
    Change c;
    c.kind = Text(r, "kind");
    c.cause = *pending_cause;
    c.generation = generation;
    c.step = Int(r, "step");
    c.shape = Text(r, "shape");
    c.time = time;
    c.downtime_s = Num(r, "downtime_s");
    c.stop_s = Num(r, "stop_s");
    c.relaunch_s = Num(r, "relaunch_s");
    c.ready_s = Num(r, "ready_s");
    c.load_s = Num(r, "load_s");
    c.first_step_s = Num(r, "first_step_s");
    c.kept = static_cast<int>(Int(r, "kept"));
    c.detected = time - c.downtime_s;
    report.changes.push_back(c);
    pending_cause->clear();
  } else if (event == "checkpoint") {
    report.checkpoints.push_back(CheckpointMark{time, generation, Int(r, "step"),
                                                Num(r, "blocked_s"), Num(r, "total_s")});
  } else if (event == "straggler") {
    report.stragglers.push_back(Straggler{time, generation, static_cast<int>(Int(r, "rank")),
                                          static_cast<int>(Int(r, "stage")), Text(r, "machine"),
                                          Num(r, "compute_s"), Num(r, "peer_median_s"),
                                          Num(r, "ratio"), Int(r, "steps")});
  } else if (event == "done" || event == "stopped" || event == "failed") {
    report.end.state = event;
    report.end.reason = Text(r, "reason");
    report.end.wall_s = Num(r, "wall_s");
    report.end.finished = true;
  }
  if (r.contains("generation") && event != "launch") {
    if (GenerationSpan* g = FindGeneration(report, generation)) g->ended = std::max(g->ended, time);
  }
}

void ReadEvents(FileSystem& fs, RunReport& report) {
  std::string pending_cause;  // what the next `first_step` was caused by
  for (const json& r : ReadRecords(fs, JoinPath(report.run_dir, "events.jsonl"),
                                   &report.skipped_lines)) {
    report.last_time = std::max(report.last_time, Num(r, "time"));
    // A later `mitra run` on the directory makes an earlier end no longer the end.
    if (Text(r, "event") == "start") report.end = RunEnd{};
    ReadEvent(r, report, &pending_cause);
  }
}

void ReadState(FileSystem& fs, RunReport& report) {
  Result<std::string> text = fs.ReadFile(JoinPath(report.run_dir, "state.json"));
  if (!text.ok()) return;
  const json state = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!state.is_object()) return;  // being replaced, or damaged: the records say enough
  report.max_steps = Int(state, "max_steps");
  if (!report.end.finished) {
    const std::string now = Text(state, "state");
    report.end.state = now.empty() || now == "done" || now == "stopped" || now == "failed"
                           ? "running"  // an end state without its end record: not over yet
                           : now;
    report.end.reason = Text(state, "reason");
  }
}

void ReadRankSteps(FileSystem& fs, RunReport& report) {
  for (const json& r : ReadRecords(fs, JoinPath(report.run_dir, "rank_steps.jsonl"),
                                   &report.skipped_lines)) {
    report.rank_steps.push_back(RankSteps{Num(r, "time"), Int(r, "generation"),
                                          static_cast<int>(Int(r, "rank")),
                                          static_cast<int>(Int(r, "stage")), Int(r, "step"),
                                          Int(r, "steps"), Num(r, "compute_s"), Num(r, "wait_s")});
  }
  if (!report.rank_steps.empty()) report.rank_source = RankSource::kRankSteps;
}

// Compute is what the step itself ran (forward, recomputation, backward, the update); the rest
// of the traced step's span is waiting (for neighbours, the reduction, the step's all-reduce).
bool IsCompute(const std::string& name) {
  if (name == "update") return true;
  if (name.empty()) return false;
  const char op = name[0];
  const bool digit_next = name.size() > 1 && name[1] >= '0' && name[1] <= '9';
  return op == 'F' || op == 'f' || op == 'B' || (op == 'R' && digit_next);
}

void ReadTraces(FileSystem& fs, RunReport& report) {
  const std::string logs = JoinPath(report.run_dir, "logs");
  for (const GenerationSpan& g : report.generations) {
    const std::string dir = JoinPath(logs, "gen-" + std::to_string(g.generation));
    for (int rank = 0; rank < g.world_size; ++rank) {
      Result<std::string> text =
          fs.ReadFile(JoinPath(dir, "rank-" + std::to_string(rank) + ".trace.json"));
      if (!text.ok()) continue;
      const json trace = json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (!trace.is_object() || !trace.contains("traceEvents")) continue;
      RankSteps s{g.launched, g.generation, rank, 0, 0, 1, 0, 0};
      double start_us = 0, end_us = 0;
      for (const json& e : trace["traceEvents"]) {
        const std::string name = Text(e, "name");
        if (name == "thread_name") {
          std::sscanf(Text(e.value("args", json::object()), "name").c_str(),
                      "rank %*d (stage %d", &s.stage);
          continue;
        }
        if (Text(e, "ph") != "X") continue;
        const double ts = Num(e, "ts"), dur = Num(e, "dur");
        start_us = Num(e.value("args", json::object()), "step_start_us", ts);
        end_us = std::max(end_us, ts + dur);
        if (IsCompute(name)) s.compute_s += dur / 1e6;
      }
      if (end_us <= start_us) continue;
      s.wait_s = std::max(0.0, (end_us - start_us) / 1e6 - s.compute_s);
      report.rank_steps.push_back(s);
    }
  }
  if (!report.rank_steps.empty()) report.rank_source = RankSource::kTraces;
}

}  // namespace

std::string GenerationSpan::Shape() const {
  return std::to_string(stages) + " x " + std::to_string(replicas);
}

int64_t RunReport::LastStep() const { return steps.empty() ? 0 : steps.back().step; }

int64_t RunReport::RepeatedSteps() const {
  std::set<int64_t> seen;
  for (const StepPoint& p : steps) seen.insert(p.step);
  return static_cast<int64_t>(steps.size() - seen.size());
}

int64_t RunReport::Samples() const {
  std::map<int64_t, int64_t> by_step;  // the last time each step was trained
  for (const StepPoint& p : steps) by_step[p.step] = p.samples;
  int64_t total = 0;
  for (const auto& [step, samples] : by_step) total += samples;
  return total;
}

double RunReport::WallSeconds() const {
  if (started > 0 && last_time > started) return last_time - started;
  return end.wall_s;
}

double RunReport::TotalDowntime() const {
  double total = 0;
  for (const Change& c : changes) total += c.downtime_s;
  return total;
}

std::optional<double> RunReport::FinalLoss() const {
  if (steps.empty()) return std::nullopt;
  return steps.back().loss;
}

std::vector<std::string> CompleteLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t begin = 0;
  for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    lines.push_back(text.substr(begin, end - begin));
  }
  return lines;  // what follows the last '\n' is still being written
}

Result<RunReport> ReadRunReport(FileSystem& fs, const std::string& run_dir) {
  if (!fs.IsDirectory(run_dir)) {
    return Status::InvalidArgument(
        fs.Exists(run_dir) ? run_dir + " is not a directory; give the run directory of a job "
                                       "(the --run-dir of `mitra run`, default mitra-run)"
                           : "no such directory: " + run_dir +
                                 "; give the run directory of a job (the --run-dir of "
                                 "`mitra run`, default mitra-run)");
  }
  if (!fs.Exists(JoinPath(run_dir, "events.jsonl")) &&
      !fs.Exists(JoinPath(run_dir, "metrics.jsonl"))) {
    return Status::InvalidArgument(
        run_dir + " is not a run directory (it has no events.jsonl or metrics.jsonl); give the "
                  "--run-dir of a job that `mitra run` started");
  }
  RunReport report;
  report.run_dir = run_dir;
  ReadEvents(fs, report);
  ReadMetrics(fs, report);
  ReadState(fs, report);
  ReadRankSteps(fs, report);
  if (report.rank_source == RankSource::kNone) ReadTraces(fs, report);
  if (report.end.state.empty()) report.end.state = "running";
  return report;
}

}  // namespace mitra::report
