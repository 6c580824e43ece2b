#include "manager/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "common/duration_text.h"

namespace mitra::manager {
namespace {

constexpr size_t kEtaWindow = 20;  // arrival intervals the ETA averages

}  // namespace

StepRecord StepRecord::Of(const contract::message::Step& step) {
  StepRecord out;
  out.step = step.step;
  out.loss = step.loss.value_or(0);
  out.tokens_per_s = step.tokens_per_s.value_or(0);
  out.step_time_s = step.step_time_s;
  out.samples_per_s = step.samples_per_s.value_or(
      step.step_time_s > 0 ? static_cast<double>(step.samples) / step.step_time_s : 0);
  return out;
}

void StepStats::Add(const StepRecord& record, double now_s) {
  if (steps_seen_ == 0) {
    first_throughput_ = record.Throughput();
  } else {
    later_throughput_sum_ += record.Throughput();
  }
  ++steps_seen_;
  if (last_arrival_s_) {
    intervals_s_.push_back(now_s - *last_arrival_s_);
    if (intervals_s_.size() > kEtaWindow) intervals_s_.pop_front();
  }
  last_arrival_s_ = now_s;
  last_ = record;
}

double StepStats::MeanThroughput() const {
  if (steps_seen_ == 0) return 0;
  if (steps_seen_ == 1) return first_throughput_;
  return later_throughput_sum_ / static_cast<double>(steps_seen_ - 1);
}

std::optional<double> StepStats::EtaSeconds(int64_t max_steps) const {
  if (max_steps <= 0 || !last_) return std::nullopt;
  double per_step = last_->step_time_s;
  if (!intervals_s_.empty()) {
    per_step = std::accumulate(intervals_s_.begin(), intervals_s_.end(), 0.0) /
               static_cast<double>(intervals_s_.size());
  }
  if (per_step <= 0) return std::nullopt;
  return static_cast<double>(std::max<int64_t>(0, max_steps - last_->step)) * per_step;
}

std::string FormatCount(double value) {
  const bool negative = value < 0;
  std::string digits = std::to_string(std::llround(std::fabs(value)));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

std::string FormatProgressLine(const StepRecord& record, int64_t max_steps,
                               std::optional<double> eta_s) {
  std::string line = "step " + std::to_string(record.step);
  if (max_steps > 0) line += "/" + std::to_string(max_steps);
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "  loss %.4f", record.loss);
  line += buffer;
  line += "  " + FormatCount(record.Throughput()) + " " + record.ThroughputUnit();
  std::snprintf(buffer, sizeof(buffer), "  %.2f s/step", record.step_time_s);
  line += buffer;
  if (eta_s) line += "  ETA " + ClockDuration(*eta_s);
  return line;
}

std::string FormatSummary(int64_t steps, double wall_s, const StepStats& stats) {
  std::string summary = std::to_string(steps) + " steps in " + ClockDuration(wall_s);
  if (stats.last()) {
    char loss[32];
    std::snprintf(loss, sizeof(loss), "%.4f", stats.last()->loss);
    summary += ", final loss " + std::string(loss) + ", mean " +
               FormatCount(stats.MeanThroughput()) + " " + stats.last()->ThroughputUnit();
  }
  return summary;
}

std::string FormatEvalLine(const contract::message::Eval& eval, const JsonObject& metrics) {
  char buffer[96];
  std::snprintf(buffer, sizeof(buffer), "eval after step %lld: loss %.4f",
                static_cast<long long>(eval.step), eval.loss.value_or(std::nan("")));
  std::string line = buffer;
  const std::vector<std::string> named = fields::FieldNames<contract::message::Eval>();
  for (const auto& [key, value] : metrics.fields()) {
    if (!value.is_number() || std::count(named.begin(), named.end(), key)) continue;
    std::snprintf(buffer, sizeof(buffer), "  %s %.4f", key.c_str(), value.number_value());
    line += buffer;
  }
  std::snprintf(buffer, sizeof(buffer), "  (%s samples, %.1f s)",
                FormatCount(static_cast<double>(eval.samples)).c_str(), eval.seconds);
  return line + buffer;
}

double RoundedSeconds(double seconds) { return std::round(seconds * 1000) / 1000; }

}  // namespace mitra::manager
