// Asking the program for its shape before the job starts.
//
// The manager runs the program once with MITRA_DESCRIBE=1; a mitra program prints
//   @mitra {"event":"describe","segments":N,"tokens_per_sample":T,
//           "micro_batch_independent":false,
//           "parameters":"embed.wte.weight[256,128] embed.wpe.weight[128,128] ...",
//           "buffers":"stem.bn.running_mean[16] ..."}
// and exits 0 without training. The segment count bounds --nstages; the parameters and
// buffers (each "<segment>.<name>[shape]", in segment order) let `mitra run` refuse another
// model's checkpoint before it starts or creates anything; whether the model is micro-batch
// independent decides whether the micro-batch size is fixed for the job.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/manifest.h"
#include "common/clock.h"
#include "launcher/process_runner.h"
#include "mitra/common/status.h"

namespace mitra::run {

using NamedShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

struct ProgramDescription {
  int segments = 0;
  double tokens_per_sample = 0;  // 0 when the program does not say
  bool micro_batch_independent = false;
  // Qualified parameter names ("embed.wte.weight") and shapes, in segment order; empty when
  // the program does not say (then only the segment count is compared with a checkpoint).
  NamedShapes parameters;
  // Likewise for buffers ("stem.bn.running_mean"); `buffers_known` when the program said.
  NamedShapes buffers;
  bool buffers_known = false;
};

// Parses the describe record's "parameters" or "buffers" text. InvalidArgument names the bad
// entry.
Result<NamedShapes> ParseParameters(const std::string& text);

// The elements of each segment's parameters and buffers, by segment (the segments in the order
// their parameters come); empty when the program did not list its parameters, or when their
// names do not make `description.segments` segments (one without parameters, say).
std::vector<int64_t> SegmentStateElements(const ProgramDescription& description);

// Whether the checkpoint at `path` (its verified `manifest`) was written by the program that
// gave `description`: same segments, and in each segment's file the same parameter and buffer
// names and shapes. InvalidArgument otherwise, naming the first difference and the fix.
Status CheckCheckpointMatches(const ProgramDescription& description,
                              const checkpoint::Manifest& manifest, const std::string& path);

// Starts `spec` (whose environment should come from DescribeEnvironment) and waits for it to
// exit, at most `timeout_s` (then kills it). Blocks. InvalidArgument when the program fails,
// prints no valid describe record, or times out; the message quotes its last output lines.
Result<ProgramDescription> DescribeProgram(launcher::ProcessRunner& runner,
                                           const launcher::ProcessSpec& spec, Clock& clock,
                                           double timeout_s);

}  // namespace mitra::run
