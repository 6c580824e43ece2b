// Profiler: what a training program costs on the machines of a list, for `mitra profile`
// (planner/profile.h, docs/planner.md).
//
// `mitra profile` starts the program once per slot with the worker contract's variables and
//   MITRA_PROFILE=1
//   MITRA_PROFILE_MACHINES="addr0 addr1 ..."   the machines, in list order
//   MITRA_PROFILE_SLOTS="2 4 ..."              their slots (ranks fill them in order)
//   MITRA_PROFILE_MICRO_BATCHES="1,2,4,8,16"   the sizes to measure
//   MITRA_PROFILE_REPEATS=5                    measurements per figure (the median is kept)
// Trainer::Run() then profiles instead of training, all processes together:
//  1. on every machine its first process alone (the others wait) measures each segment at each
//     micro-batch size: forward with and without autograd, backward (the last segment from its
//     loss), activation bytes and the heap its forward keeps, the update over its parameters,
//     parameter, buffer and optimizer bytes, and loading a sample;
//  2. each machine's first k processes run the model's forward and backward at once, k = 1 ..
//     slots, which gives the speed of each process while k compute;
//  3. rank 0 exchanges messages of several sizes with a second process of its machine and with
//     the first process of every other machine; everyone all-reduces several sizes, and the
//     step's small all-reduce;
//  4. when a machine has several slots, every process trains a few steps of the runtime itself
//     as one replica of a data-parallel shape (1 x world), and each machine's speed with all
//     its processes computing becomes what those steps measured, its compute against its cost
//     alone from 1 (planner/sharing.h: the processes also share the cores with their
//     communication, which the workload of 2 leaves out).
// Each machine's first process prints `@mitra {"event":"profile_machine",...}` and rank 0
// `@mitra {"event":"profile_comm",...}`; `mitra profile` assembles them into profile.json.
#pragma once

#include <memory>

#include "mitra/cutpoint/model.h"
#include "mitra/worker/data.h"
#include "mitra/worker/placement.h"
#include "mitra/worker/runtime.h"

namespace mitra::worker {

// True when the program was started by `mitra profile` (MITRA_PROFILE=1).
using contract::ProfileRequested;

// Runs this process's part of the profile; returns the exit code (0, 1 on a lost peer, 2 on bad
// settings).
int RunProfile(const cutpoint::ModelSpec& spec, const std::shared_ptr<const Dataset>& dataset,
               const RuntimeOptions& options, const Placement& placement);

}  // namespace mitra::worker
