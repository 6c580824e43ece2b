// A made-up profile for the planner's tests: identical segments whose costs do not depend on
// the micro-batch size, free messages and all-reduces.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "planner/profile.h"

namespace mitra::planner {

// An all-reduce over 2 processes, idle figures only.
inline AllreduceProfile Allreduce(double latency_s, double bytes_per_s) {
  AllreduceProfile a;
  a.group = 2;
  a.latency_s = latency_s;
  a.bytes_per_s = bytes_per_s;
  return a;
}

// `segments` identical segments: forward f, backward b per sample-free micro-batch (the same at
// every size), graph bytes g per micro-batch, no communication cost, one speed for any load.
inline Profile Uniform(int segments, double f, double b, int64_t graph = 1000,
                       std::vector<double> speed = {1.0}) {
  Profile p;
  p.micro_batches = {1, 2, 4, 8};
  MachineProfile m;
  m.address = "m0";
  m.slots = 1;
  m.speed = std::move(speed);
  for (int s = 0; s < segments; ++s) {
    SegmentProfile seg;
    seg.name = "s" + std::to_string(s);
    seg.parameters = 100;
    seg.parameter_bytes = 400;
    for (int64_t mb : p.micro_batches) {
      seg.costs.push_back({mb, f, f, b, 64, graph});
    }
    m.segments.push_back(seg);
  }
  p.machines.push_back(m);
  for (const char* to : {"m1", "m0"}) {
    LinkProfile link;  // free
    link.from = "m0";
    link.to = to;
    link.bytes_per_s = 1e18;
    p.links.push_back(link);
  }
  p.allreduce.push_back(Allreduce(0, 1e18));
  return p;
}

}  // namespace mitra::planner
