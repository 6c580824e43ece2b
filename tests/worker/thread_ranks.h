// Ranks as threads: the worker's runtime pieces run by several ranks inside the test's process,
// as Gloo's own tests run them. Each rank's Comm (worker/comm/comm.h) joins its groups over one
// in-memory c10d::HashStore (Comm::Join) and Gloo connects the ranks over 127.0.0.1, so a test
// of a collective takes milliseconds and can look at every rank's tensors.
//
// The threads share the process's default CPU generator: build what draws from it (Stage,
// cutpoint::BuildSegment) before the ranks start, or use segments that do not draw from it to
// initialise their weights (a Runtime builds its stage while its peers build theirs).
#pragma once

#include <functional>

#include "mitra/worker/placement.h"
#include "worker/comm/comm.h"

namespace mitra::testing {

// How long a rank waits for its peers before a PeerError: long enough for a loaded small
// machine, short enough that a broken test fails in seconds rather than hanging.
constexpr double kRankTimeoutS = 10;

// The placement of `rank` in a `stages` x `replicas` job on loopback, in the default layout
// (stage s on ranks s, s + P, s + 2P, ...). `rdzv_port` only matters to a Runtime, which
// rendezvous through the job's store (Comm::Connect); rank 0 hosts it, and the ranks, threads of
// one process run alone, share its own job token.
worker::Placement LoopbackPlacement(int stages, int replicas, int rank, int rdzv_port = 0,
                                    double timeout_s = kRankTimeoutS);

// Runs body(rank) for every rank in [0, world), each on a thread of its own, all at once, and
// returns when every body has returned. A C++ exception that escapes a body is reported as a
// test failure naming the rank. gtest's assertions work in a body; a fatal one ends only that
// body (its peers then fail their waits after the timeout). Sets LibTorch to one intra-op
// thread: the ranks are the parallelism.
void RunRanks(int world, const std::function<void(int rank)>& body);

// RunRanks, each rank with its Comm in a `stages` x `replicas` job (LoopbackPlacement) joined
// over one HashStore. The Comms are destroyed as their bodies return.
void RunWithComms(int stages, int replicas,
                  const std::function<void(const worker::Placement& placement, worker::Comm& comm)>&
                      body,
                  double timeout_s = kRankTimeoutS);

}  // namespace mitra::testing
