#include "contract/step_trace.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/json.h"

namespace mitra::contract {
namespace {

using nlohmann::json;

constexpr const char* kThreadName = "thread_name";

double Number(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<double>() : 0;
}

std::string Text(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

int Whole(const json& object, const char* key) {
  const double n = Number(object, key);
  return n >= 0 && n < 1e9 ? static_cast<int>(n) : 0;
}

}  // namespace

bool IsComputeSpan(std::string_view name) {
  if (name == "update") return true;
  if (name.empty()) return false;
  const char op = name[0];
  const bool digit_next = name.size() > 1 && name[1] >= '0' && name[1] <= '9';
  return op == 'F' || op == 'f' || op == 'B' || ((op == 'R' || op == 'W') && digit_next);
}

double TracedStep::ComputeSeconds() const {
  double us = 0;
  for (const Span& s : spans) {
    if (IsComputeSpan(s.name)) us += s.duration_us;
  }
  return us / 1e6;
}

double TracedStep::WallSeconds() const {
  double end_us = step_start_us;
  for (const Span& s : spans) end_us = std::max(end_us, s.start_us + s.duration_us);
  return (end_us - step_start_us) / 1e6;
}

double TracedStep::WaitSeconds() const {
  return std::max(0.0, WallSeconds() - ComputeSeconds());
}

std::string StepTraceJson(const TracedStep& step) {
  std::string out = "{\"traceEvents\":[";
  char buffer[200];
  std::snprintf(buffer, sizeof(buffer),
                "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":"
                "\"rank %d (stage %d, replica %d)\",\"rank\":%d,\"stage\":%d,\"replica\":%d}}",
                kThreadName, step.rank, step.rank, step.stage, step.replica, step.rank, step.stage,
                step.replica);
  out += buffer;
  for (const TracedStep::Span& s : step.spans) {
    std::snprintf(buffer, sizeof(buffer),
                  ",{\"name\":%s,\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f,"
                  "\"args\":{\"step_start_us\":%.1f}}",
                  JsonQuote(s.name).c_str(), step.rank, s.start_us, s.duration_us,
                  step.step_start_us);
    out += buffer;
  }
  out += "],\"displayTimeUnit\":\"ms\"}\n";
  return out;
}

std::optional<TracedStep> ParseStepTrace(std::string_view text) {
  const json trace = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!trace.is_object()) return std::nullopt;
  const auto events = trace.find("traceEvents");
  if (events == trace.end() || !events->is_array()) return std::nullopt;
  TracedStep step;
  bool placed = false;  // stage and replica read from the args (an older mitra wrote none)
  std::string thread_name;
  for (const json& e : *events) {
    if (!e.is_object()) continue;
    const std::string name = Text(e, "name"), phase = Text(e, "ph");
    const auto found = e.find("args");
    const json args = found != e.end() && found->is_object() ? *found : json::object();
    if (phase == "M" && name == kThreadName) {
      thread_name = Text(args, "name");
      placed = args.contains("stage");
      step.rank = Whole(args, "rank");
      step.stage = Whole(args, "stage");
      step.replica = Whole(args, "replica");
    } else if (phase == "X") {
      const double ts = Number(e, "ts");
      step.step_start_us = args.contains("step_start_us") ? Number(args, "step_start_us") : ts;
      step.spans.push_back({name, ts, Number(e, "dur")});
    }
  }
  if (!placed) {  // "rank R (stage S, replica D)"
    int rank = 0, stage = 0, replica = 0;
    if (std::sscanf(thread_name.c_str(), "rank %d (stage %d, replica %d", &rank, &stage,
                    &replica) == 3 &&
        rank >= 0 && stage >= 0 && replica >= 0) {
      step.rank = rank;
      step.stage = stage;
      step.replica = replica;
    }
  }
  return step;
}

}  // namespace mitra::contract
