#include "manager/profile_check.h"

#include <nlohmann/json.hpp>

#include "common/median.h"

namespace mitra::manager {

std::optional<ProfileCheck::Verdict> ProfileCheck::Observe(double step_s) {
  if (predicted_s_ <= 0 || ++seen_ <= kWarmUpSteps || times_.size() == kMeasuredSteps) {
    return std::nullopt;
  }
  times_.push_back(step_s);
  if (times_.size() < kMeasuredSteps) return std::nullopt;
  Verdict v;
  v.predicted_s = predicted_s_;
  v.measured_s = Median(times_);
  v.ratio = v.measured_s / predicted_s_;
  v.disagrees = v.ratio > kDisagreement || v.ratio < 1 / kDisagreement;
  return v;
}

namespace {

// Replaces the correction of the same machine and load, or adds it.
void Keep(std::vector<planner::SpeedCorrection>& out, planner::SpeedCorrection correction) {
  if (correction.address.empty() || correction.busy < 1 || !(correction.factor > 0)) return;
  for (planner::SpeedCorrection& kept : out) {
    if (kept.address == correction.address && kept.busy == correction.busy) {
      kept.factor = correction.factor;
      return;
    }
  }
  out.push_back(std::move(correction));
}

}  // namespace

std::vector<planner::SpeedCorrection> RecordedCorrections(
    const std::vector<records::EventRecord>& events) {
  std::vector<planner::SpeedCorrection> out;
  for (const records::EventRecord& e : events) {
    if (e.event == "slow_machine") {
      Keep(out, {e.fields.GetString("machine").value_or(""),
                 static_cast<int>(e.fields.GetNumber("busy").value_or(0)),
                 e.fields.GetNumber("factor").value_or(0)});
      continue;
    }
    const JsonValue* corrections = e.fields.Find("corrections");
    if (e.event != "profile_check" || corrections == nullptr) continue;
    const nlohmann::json array =
        nlohmann::json::parse(corrections->string_value(), nullptr, /*allow_exceptions=*/false);
    if (!array.is_array()) continue;
    for (const nlohmann::json& c : array) {
      const auto number = [&](const char* key) {
        return c.contains(key) && c[key].is_number() ? c[key].get<double>() : 0.0;
      };
      if (!c.is_object() || !c.contains("machine") || !c["machine"].is_string()) continue;
      Keep(out, {c["machine"].get<std::string>(), static_cast<int>(number("busy")),
                 number("factor")});
    }
  }
  return out;
}

}  // namespace mitra::manager
