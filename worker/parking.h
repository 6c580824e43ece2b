// Parking: a worker that stopped because the manager asked it to (a morph), with its checkpoint
// on disk, waits alive for its place in the next generation instead of exiting, so that the next
// generation starts without a process start (loading LibTorch and the program's data, building
// the model): the worker builds its new stage, rendezvous with the new generation and restores
// the checkpoint it just wrote. The lines it reads are contract/park.h's.
#pragma once

#include <optional>

#include "mitra/common/status.h"
#include "mitra/worker/placement.h"

namespace mitra::worker {

// What a parked worker holds in memory (worker/step/held_state.h): the state of segments
// [first, end) after `step` steps, `bytes` in all; step -1 when nothing.
struct ParkedHolding {
  int64_t step = -1;
  int first = 0, end = 0;
  int64_t bytes = 0;
};

// Says the worker is parked (`@mitra {"event":"parked","rank":R,"step":S}`, with
// `"held_step","held_first_segment","held_end_segment","held_bytes"` when it holds state; a standby worker,
// which has no place yet, says rank -1 and step -1) and waits for one line on `fd` for at most
// `timeout_s`: the next placement, or nullopt when the worker should exit (told so, the end of
// the input, or nothing within `timeout_s`, which is logged). InvalidArgument for a line that is
// not an order, or a placement that does not parse.
Result<std::optional<Placement>> AwaitPlacement(int fd, int rank, int64_t step, double timeout_s,
                                                const ParkedHolding& holding = {});

}  // namespace mitra::worker
