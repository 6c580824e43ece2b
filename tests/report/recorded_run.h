// A recorded run (events.jsonl and metrics.jsonl, as the manager writes them) for the tests of
// what reads a run directory: the report (tests/report/) and `mitra report` (tests/cli/).
#pragma once

#include <string>

namespace mitra::testing {

// A 1 x 2 job that morphed to 1 x 1 after step 3, lost its rank 0 after step 5 and recovered
// from the checkpoint of step 4 (so step 5 was trained twice), then finished at step 6.
inline constexpr const char* kRecordedEvents =
    R"({"time":100.0,"event":"start","program":"/bin/train","tokens_per_sample":0}
{"time":100.5,"event":"launch","generation":0,"stages":1,"replicas":2,"world_size":2,"resume_step":0}
{"time":101.0,"event":"ready","rendezvous_s":0.5,"generation":0}
{"time":103.0,"event":"morph","reason":"machine list changed: localhost 2 -> 1 slots","from":"1 x 2","step":3,"generation":0}
{"time":103.2,"event":"checkpoint","step":4,"blocked_s":0.02,"total_s":0.05,"generation":0,"rank":0}
{"time":103.4,"event":"worker_exit","rank":0,"generation":0}
{"time":103.5,"event":"launch","generation":1,"stages":1,"replicas":1,"world_size":1,"resume_step":4}
{"time":104.0,"event":"first_step","kind":"morph","step":5,"shape":"1 x 1","downtime_s":1.0,"stop_s":0.4,"relaunch_s":0.1,"first_step_s":0.5,"generation":1}
{"time":105.0,"event":"failure","reason":"rank 0 (pid 7) was killed by signal SIGKILL after step 5","rank":0,"pid":7,"machine":"localhost","step":5,"generation":1}
{"time":105.1,"event":"launch","generation":2,"stages":1,"replicas":1,"world_size":1,"resume_step":4}
{"time":107.0,"event":"first_step","kind":"recovery","step":5,"shape":"1 x 1","downtime_s":2.0,"stop_s":0.2,"relaunch_s":0,"first_step_s":1.8,"state_kept":1,"state_peer":1,"state_checkpoint":0,"peer_bytes":2500000,"peer_bytes_per_s":1e9,"generation":2}
{"time":108.0,"event":"checkpoint","step":6,"blocked_s":0.01,"total_s":0.03,"generation":2,"rank":0}
{"time":108.1,"event":"done","step":6,"wall_s":8.1,"loss":1.5,"mean_samples_per_s":80}
)";

inline std::string RecordedStep(int step, int generation, double time, double loss) {
  return R"({"step":)" + std::to_string(step) + R"(,"loss":)" + std::to_string(loss) +
         R"(,"samples":8,"samples_per_s":80,"step_time_s":0.1,"generation":)" +
         std::to_string(generation) + R"(,"time":)" + std::to_string(time) + "}\n";
}

// Its metrics.jsonl.
inline std::string RecordedMetrics() {
  return RecordedStep(1, 0, 101.5, 3.0) + RecordedStep(2, 0, 102.0, 2.8) + RecordedStep(3, 0, 102.5, 2.6) +
         RecordedStep(4, 0, 103.1, 2.4) + RecordedStep(5, 1, 104.0, 2.2) + RecordedStep(5, 2, 107.0, 2.2) +
         R"({"step":5,"eval_samples":64,"eval_loss":2.3,"eval_accuracy":0.5,"generation":2,"time":107.2})"
         "\n" +
         RecordedStep(6, 2, 107.5, 1.5);
}

}  // namespace mitra::testing
