#include "manager/run_records.h"

#include "common/signal_watcher.h"

namespace mitra::manager {
namespace {

void SetShape(const GridPlan& plan, int64_t generation, JsonObject* o) {
  o->SetInt("generation", generation)
      .SetInt("stages", plan.stages)
      .SetInt("replicas", plan.replicas)
      .SetInt("world_size", plan.world_size())
      .SetInt("global_batch", plan.global_batch)
      .SetInt("chunk_size", plan.chunk_size)
      .SetString("stage_to_rank_map", plan.stage_map.ToString());
}

}  // namespace

JsonObject LaunchRecord(const GridPlan& plan, int64_t generation, const std::string& program,
                        const std::vector<int64_t>& pids, double launch_s) {
  JsonObject o;
  SetShape(plan, generation, &o);
  if (plan.schedule) {
    o.SetString("schedule", std::string(planner::ScheduleName(*plan.schedule)) +
                                (plan.recompute ? "+recompute" : ""))
        .SetString("partition", plan.partition);
  }
  if (plan.predicted_step_s > 0) {
    o.SetNumber("predicted_step_s", plan.predicted_step_s)
        .SetInt("predicted_memory_bytes", plan.predicted_memory_bytes);
  }
  o.Set("pids", JsonValue::IntArray(pids))
      .SetString("program", program)
      .SetNumber("launch_s", RoundedSeconds(launch_s));
  return o;
}

JsonObject WorkerExitRecord(int rank, int pid, const launcher::ExitStatus& exit,
                            bool stopped_record, double after_s) {
  JsonObject o;
  o.SetInt("rank", rank).SetInt("pid", pid).SetString("status", exit.ToString());
  if (exit.signal != 0) {
    o.SetString("signal", SignalName(exit.signal));
  } else {
    o.SetInt("exit_code", exit.exit_code);
  }
  o.SetBool("stopped_record", stopped_record).SetNumber("after_s", RoundedSeconds(after_s));
  return o;
}

JsonObject MetricsRecord(const JsonObject& step_record, const GridPlan& plan, int64_t generation) {
  JsonObject o = step_record;
  o.Erase("event");
  if (!o.Has("stages")) o.SetInt("stages", plan.stages);
  if (!o.Has("replicas")) o.SetInt("replicas", plan.replicas);
  if (!o.Has("generation")) o.SetInt("generation", generation);
  return o;
}

JsonObject StateRecord(const JsonObject& fixed, const GridPlan& plan, int64_t generation,
                       const StateSnapshot& snapshot) {
  JsonObject o;
  o.SetString("state", snapshot.state);
  for (const auto& [key, value] : fixed.fields()) o.Set(key, value);
  SetShape(plan, generation, &o);
  o.SetInt("step", snapshot.step).SetInt("max_steps", snapshot.max_steps);
  if (snapshot.last_step) {
    o.SetNumber("loss", snapshot.last_step->loss)
        .SetNumber("samples_per_s", snapshot.last_step->samples_per_s);
    if (snapshot.last_step->tokens_per_s > 0) {
      o.SetNumber("tokens_per_s", snapshot.last_step->tokens_per_s);
    }
  }
  o.SetInt("ready_workers", snapshot.ready_workers)
      .SetInt("running_workers", snapshot.running_workers)
      .Set("pids", JsonValue::IntArray(snapshot.pids))
      .SetNumber("elapsed_s", RoundedSeconds(snapshot.elapsed_s))
      .SetNumber("updated_at", snapshot.updated_at);
  return o;
}

}  // namespace mitra::manager
