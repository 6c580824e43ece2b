// A rank's traced step (logs/gen-G/rank-R.trace.json, docs/mitra-run.md): written by the worker
// (worker/step/step_trace.h), read by `mitra report` and `mitra plan --validate` (through
// records/reader.h), in one format, spelled here once.
//
// The file is a chrome trace (chrome://tracing, Perfetto): a metadata event naming the thread
// "rank R (stage S, replica D)", with R, S and D also as numbers in its args (a trace of an
// older mitra has the name alone, which is read then), then one complete ("X") event per span,
// times in wall-clock microseconds, each with the step's start in its args (`step_start_us`;
// without it, the span's own).
//
// Plain values: copyable, no synchronization.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mitra::contract {

// Whether a span of a step trace (named as planner::OpName writes instructions: F3, f3, R3, B3,
// Bi3, W3, Ra3, Rg3, Sa3, Sg3; and the phases "reduce", "update") is the rank's own compute:
// forwards, recomputations, backwards (whole, B or W) and the update. The rest of the step is
// waiting for peers.
bool IsComputeSpan(std::string_view name);

struct TracedStep {
  struct Span {
    std::string name;  // an instruction (planner::OpName: F3, B3, R3, ...) or a phase ("update")
    double start_us = 0, duration_us = 0;
  };
  int rank = 0, stage = 0, replica = 0;
  double step_start_us = 0;  // wall clock
  std::vector<Span> spans;   // in the order they began

  // The rank's own compute in the step (IsComputeSpan), and the rest of the step until its last
  // span ended: waiting for peers.
  double ComputeSeconds() const;
  double WaitSeconds() const;
  // From the step's start to the end of its last span; 0 for a trace without spans.
  double WallSeconds() const;
};

// The trace's JSON, a line.
std::string StepTraceJson(const TracedStep& step);

// nullopt for text that is not a trace of this form (a file cut short, another program's).
// Events of other kinds are skipped.
std::optional<TracedStep> ParseStepTrace(std::string_view text);

}  // namespace mitra::contract
