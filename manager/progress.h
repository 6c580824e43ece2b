// Progress on the terminal: per-step lines, ETA and the final summary.
//
// StepStats accumulates what the `step` records say; the Format* functions are pure.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "contract/worker_messages.h"

namespace mitra::manager {

// What the terminal shows of a worker's `step` record.
struct StepRecord {
  int64_t step = 0;  // completed steps, 1-based
  double loss = 0;
  double samples_per_s = 0;
  double tokens_per_s = 0;  // 0: the program reports no tokens (not a language model)
  double step_time_s = 0;

  // Tokens/s for a program that reports tokens, else samples/s; and its unit.
  double Throughput() const { return tokens_per_s > 0 ? tokens_per_s : samples_per_s; }
  const char* ThroughputUnit() const { return tokens_per_s > 0 ? "tokens/s" : "samples/s"; }

  // Fields the worker left out are 0 (a NaN loss too); samples/s, when left out, is the
  // samples over the step's time.
  static StepRecord Of(const contract::message::Step& step);
};

// Not thread-safe.
class StepStats {
 public:
  // `now_s`: monotonic seconds when the record arrived (the ETA uses arrival intervals, which
  // include everything between steps, not only the worker's step time).
  void Add(const StepRecord& record, double now_s);

  int64_t steps_seen() const { return steps_seen_; }
  const std::optional<StepRecord>& last() const { return last_; }
  // Mean throughput (StepRecord::Throughput, in the last record's unit) over the steps after
  // the first (the first includes warm-up); over the first step when it is the only one; 0
  // before any.
  double MeanThroughput() const;
  // Seconds until step `max_steps` at the recent pace; nullopt when unknown.
  std::optional<double> EtaSeconds(int64_t max_steps) const;

 private:
  int64_t steps_seen_ = 0;
  std::optional<StepRecord> last_;
  double first_throughput_ = 0;
  double later_throughput_sum_ = 0;
  std::optional<double> last_arrival_s_;
  std::deque<double> intervals_s_;  // the most recent arrival intervals
};

// Whole number with thousands separators: "12,345".
std::string FormatCount(double value);
// "step 12/100  loss 2.3456  12,345 tokens/s  0.52 s/step  ETA 0:45" (samples/s for a program
// without tokens); without "/100" and ETA when max_steps is 0.
std::string FormatProgressLine(const StepRecord& record, int64_t max_steps,
                               std::optional<double> eta_s);
// "5 steps in 0:12, final loss 2.0000, mean 8,960 tokens/s" (no loss part before any step).
std::string FormatSummary(int64_t steps, double wall_s, const StepStats& stats);
// "eval after step 100: loss 0.4123  accuracy 0.8512  (10,000 samples, 2.1 s)" from an `eval`
// record and its metrics (the numeric fields of `metrics` that the kind does not name); "loss
// nan" when the worker's was not a number.
std::string FormatEvalLine(const contract::message::Eval& eval, const JsonObject& metrics);
// Seconds rounded to milliseconds, for records ("launch_s": 0.021).
double RoundedSeconds(double seconds);

}  // namespace mitra::manager
