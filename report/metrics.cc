#include "report/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <optional>

#include "manager/machine_state.h"

namespace mitra::report {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::Counter;
using prometheus::Gauge;

// The states state.json and `mitra status` name (docs/mitra-run.md#statejson), each a member of
// mitra_state from the start so that a query for one finds 0 rather than nothing.
constexpr const char* kStates[] = {"running",  "morphing", "recovering", "waiting",
                                   "stopping", "done",     "stopped",    "failed"};
// What a first_step record's `kind` says the downtime was for.
constexpr const char* kChangeKinds[] = {"morph", "recovery"};

Gauge* NewGauge(prometheus::Registry& registry, const std::string& name, const std::string& help) {
  return &BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

Counter* NewCounter(prometheus::Registry& registry, const std::string& name,
                    const std::string& help) {
  return &BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

// A label value from a state's words: "in use" -> "in_use".
std::string LabelValue(std::string text) {
  std::replace(text.begin(), text.end(), ' ', '_');
  return text;
}

// A counter only goes up: a missing, negative or non-number amount adds nothing.
void Add(Counter* counter, std::optional<double> amount) {
  if (amount && *amount > 0) counter->Increment(*amount);
}

}  // namespace

RunMetrics::RunMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  step_ = NewGauge(r, "mitra_step", "The last training step the job completed.");
  loss_ = NewGauge(r, "mitra_loss", "The training loss of the last step.");
  samples_per_second_ = NewGauge(r, "mitra_samples_per_second",
                                 "Training throughput of the last step, in samples per second.");
  tokens_per_second_family_ =
      &BuildGauge()
           .Name("mitra_tokens_per_second")
           .Help(
               "Training throughput of the last step, in tokens per second (programs that "
               "declare tokens per sample).")
           .Register(r);
  generation_ = NewGauge(r, "mitra_generation",
                         "The current generation: every launch of the workers (the first, each "
                         "morph and recovery, each start of mitra run on the run directory) "
                         "begins a new one.");
  world_size_ = NewGauge(r, "mitra_world_size",
                         "Workers in the current shape, stages x replicas (0 while the job waits "
                         "for machines).");
  stages_ = NewGauge(r, "mitra_stages", "Pipeline stages P of the current shape.");
  replicas_ = NewGauge(r, "mitra_replicas", "Data-parallel replicas D of the current shape.");
  ready_workers_ = NewGauge(r, "mitra_ready_workers",
                            "Workers of the current generation that have reported ready.");
  last_checkpoint_step_ = NewGauge(r, "mitra_last_checkpoint_step",
                                   "The step of the newest complete checkpoint written since the "
                                   "manager started (0: none yet).");
  state_family_ = &BuildGauge()
                       .Name("mitra_state")
                       .Help(
                           "1 for the manager's current state (running, morphing, recovering, "
                           "waiting, stopping, done, stopped, failed), 0 for the others.")
                       .Register(r);
  for (const char* state : kStates) states_[state] = &state_family_->Add({{"state", state}});
  machines_family_ = &BuildGauge()
                          .Name("mitra_machines")
                          .Help(
                              "Machines of the list by state: in_use (running workers), idle, "
                              "failed (kept out until a health check passes), drained (kept out "
                              "until its line changes), checking (a health check under way), "
                              "removed (out of the list, ranks still there).")
                          .Register(r);
  for (manager::MachineState s : manager::kMachineStates) {  // each as a label: "in_use"
    const std::string state = LabelValue(manager::MachineStateName(s));
    machines_[state] = &machines_family_->Add({{"state", state}});
  }

  failures_ = NewCounter(r, "mitra_failures_total",
                         "Unplanned failures: a worker that crashed, hung, lost its machine or "
                         "could not be started. The job goes on from the newest checkpoint "
                         "until more than --max-restarts fall within 10 minutes.");
  morphs_ = NewCounter(r, "mitra_morphs_total",
                       "Planned changes of shape (the machine list changed, or a machine "
                       "joined): every worker checkpointed after the same step and the job "
                       "was relaunched in the new shape.");
  restarts_ = NewCounter(r, "mitra_restarts_total",
                         "Relaunches of the workers after a failure (recoveries), counted at "
                         "the launch.");
  downtime_family_ = &BuildCounter()
                          .Name("mitra_downtime_seconds_total")
                          .Help(
                              "Seconds of training lost to morphs and recoveries: from the "
                              "change being seen to the first step after it (stop, relaunch, "
                              "start-up and checkpoint load), by kind.")
                          .Register(r);
  for (const char* kind : kChangeKinds) downtime_[kind] = &downtime_family_->Add({{"kind", kind}});
  checkpoints_ = NewCounter(r, "mitra_checkpoints_total", "Complete checkpoints written.");
  checkpoint_blocked_ = NewCounter(r, "mitra_checkpoint_blocked_seconds_total",
                                   "Seconds the training loop was blocked by checkpoints (while "
                                   "their tensors were copied); the rest is written in the "
                                   "background.");
  stragglers_ = NewCounter(r, "mitra_stragglers_total",
                           "Straggler events: a rank that computed markedly slower than its "
                           "stage's peers.");
}

RunMetrics::~RunMetrics() = default;

std::string RunMetrics::Text() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

void RunMetrics::OnEvent(const JsonObject& record) {
  const std::string event = record.GetString("event").value_or("");
  if (event == records::Launch::kEvent) {
    SetShape(records::FromJson<records::Launch>(record).shape);
    ready_workers_->Set(0);
    if (restart_pending_) restarts_->Increment();
    restart_pending_ = false;
  } else if (event == records::Failure::kEvent) {
    failures_->Increment();
    restart_pending_ = true;
  } else if (event == records::Failure::kAfterTrainingEvent) {
    failures_->Increment();  // nothing is relaunched: the run ends failed
  } else if (event == records::Morph::kEvent) {
    morphs_->Increment();
  } else if (event == records::FirstStep::kEvent) {
    const auto first = records::FromJson<records::FirstStep>(record);
    const auto kind = downtime_.find(first.kind);
    if (kind != downtime_.end()) Add(kind->second, first.downtime_s);
  } else if (event == records::Checkpoint::kEvent) {
    const auto checkpoint = records::FromJson<records::Checkpoint>(record);
    checkpoints_->Increment();
    Add(checkpoint_blocked_, checkpoint.blocked_s);  // optional: nothing when absent
    last_checkpoint_step_->Set(
        std::max(last_checkpoint_step_->Value(), static_cast<double>(checkpoint.step)));
  } else if (event == records::Straggler::kEvent) {
    stragglers_->Increment();
  }
}

void RunMetrics::OnStep(const JsonObject& record) {
  // An evaluation's record has eval_ fields and no loss: it says nothing of training.
  if (!records::StepMetrics::IsStep(record)) return;
  const auto step = records::FromJson<records::StepMetrics>(record);
  loss_->Set(step.loss);
  step_->Set(static_cast<double>(step.step));
  samples_per_second_->Set(step.samples_per_s);
  if (step.tokens_per_s) {
    if (tokens_per_second_ == nullptr) tokens_per_second_ = &tokens_per_second_family_->Add({});
    tokens_per_second_->Set(*step.tokens_per_s);
  }
}

void RunMetrics::OnState(const JsonObject& json) {
  const auto state = records::FromJson<records::State>(json);
  SetOnly(state_family_, &states_, state.state);
  if (state.state == "waiting") {
    // No shape runs; state.json still shows the last one.
    world_size_->Set(0);
    stages_->Set(0);
    replicas_->Set(0);
  } else {
    SetShape(state.shape);
  }
  ready_workers_->Set(static_cast<double>(state.ready_workers));
  step_->Set(static_cast<double>(state.step));
}

void RunMetrics::OnMachines(const std::vector<manager::MachineStatus>& machines) {
  std::map<std::string, int> counts;
  for (const manager::MachineStatus& m : machines) ++counts[LabelValue(m.state)];
  for (auto& [state, gauge] : machines_) gauge->Set(0);
  for (const auto& [state, count] : counts) {
    auto it = machines_.find(state);
    if (it == machines_.end()) {
      it = machines_.emplace(state, &machines_family_->Add({{"state", state}})).first;
    }
    it->second->Set(count);
  }
}

void RunMetrics::SetShape(const records::Shape& shape) {
  generation_->Set(static_cast<double>(shape.generation));
  world_size_->Set(static_cast<double>(shape.world_size));
  stages_->Set(static_cast<double>(shape.stages));
  replicas_->Set(static_cast<double>(shape.replicas));
}

void RunMetrics::SetOnly(GaugeFamily* family, std::map<std::string, prometheus::Gauge*>* members,
                         const std::string& chosen) {
  if (chosen.empty()) return;
  if (members->find(chosen) == members->end()) {
    members->emplace(chosen, &family->Add({{"state", chosen}}));
  }
  for (auto& [name, gauge] : *members) gauge->Set(name == chosen ? 1 : 0);
}

}  // namespace mitra::report
