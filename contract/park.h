// What the manager tells a parked worker (docs/worker-contract.md, "Parking"), written and read
// in one place.
//
// A worker started with MITRA_PARK=1 that stops because the manager asked it to (SIGUSR1), with
// its checkpoint on disk, may print `@mitra {"event":"parked",...}` and wait, alive, for one
// line on its standard input:
//
//   {"placement":{"MITRA_RANK":"2",...}}   train again, in this place: the contract's variables
//                                          as a launch would set them
//   {"exit":true}                          exit 0 (so does the end of the input)
//
// Nothing here depends on LibTorch.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "mitra/common/status.h"
#include "mitra/contract/placement.h"

namespace mitra::contract {

// One order for a parked worker: a placement to train in, or (nullopt) exit.
struct ParkOrder {
  std::optional<Environment> placement;
};

// The line that hands a parked worker `environment`'s contract variables (the rest of it, the
// process's own environment, stays as it was at the worker's start). No newline.
std::string PlacementLine(const Environment& environment);
// The line that lets a parked worker exit. No newline.
std::string ExitLine();

// Reads a line written by PlacementLine or ExitLine; InvalidArgument for anything else, naming
// what was wrong.
Result<ParkOrder> ParseParkLine(std::string_view line);

}  // namespace mitra::contract
