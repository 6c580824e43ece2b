#include "manager/run_records.h"

#include "common/signal_watcher.h"

namespace mitra::manager {
namespace {

records::Shape ShapeOf(const GridPlan& plan, int64_t generation) {
  records::Shape shape;
  shape.generation = generation;
  shape.stages = plan.stages;
  shape.replicas = plan.replicas;
  shape.world_size = plan.world_size();
  shape.global_batch = plan.global_batch;
  shape.chunk_size = plan.chunk_size;
  shape.stage_to_rank_map = plan.stage_map.ToString();
  return shape;
}

}  // namespace

records::Launch LaunchRecord(const GridPlan& plan, int64_t generation, const std::string& program,
                             const std::vector<int64_t>& pids, double launch_s) {
  records::Launch r;
  r.shape = ShapeOf(plan, generation);
  if (plan.schedule) {
    r.schedule = std::string(planner::ScheduleName(*plan.schedule)) + (plan.recompute ? "+recompute" : "");
    r.partition = plan.partition;
  }
  if (!plan.shares.empty()) r.shares = plan.shares;
  if (plan.predicted_step_s > 0) {
    r.predicted_step_s = plan.predicted_step_s;
    r.predicted_memory_bytes = plan.predicted_memory_bytes;
  }
  r.pids = pids;
  r.program = program;
  r.launch_s = RoundedSeconds(launch_s);
  return r;
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

JsonObject MetricsRecord(const contract::message::Step& step, const JsonObject& more,
                         const GridPlan& plan, int64_t generation) {
  contract::message::Step filled = step;
  if (!filled.stages) filled.stages = plan.stages;
  if (!filled.replicas) filled.replicas = plan.replicas;
  if (!filled.generation) filled.generation = generation;
  return contract::MessageFields(filled, more);
}

JsonObject StateRecord(const records::Job& job, const GridPlan& plan, int64_t generation,
                       const StateSnapshot& snapshot) {
  records::State r;
  r.state = snapshot.state;
  r.reason = snapshot.reason;
  r.job = job;
  r.shape = ShapeOf(plan, generation);
  r.step = snapshot.step;
  r.max_steps = snapshot.max_steps;
  if (snapshot.last_step) {
    r.loss = snapshot.last_step->loss;
    r.samples_per_s = snapshot.last_step->samples_per_s;
    if (snapshot.last_step->tokens_per_s > 0) r.tokens_per_s = snapshot.last_step->tokens_per_s;
  }
  r.ready_workers = snapshot.ready_workers;
  r.running_workers = snapshot.running_workers;
  r.pids = snapshot.pids;
  r.elapsed_s = RoundedSeconds(snapshot.elapsed_s);
  r.updated_at = snapshot.updated_at;
  return records::ToJson(r);
}

}  // namespace mitra::manager
