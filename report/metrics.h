// RunMetrics: the run as Prometheus metrics, kept up to date from the manager's own records.
//
// It is a RunObserver (run_observer.h): the journal hands it every events.jsonl and
// metrics.jsonl record and every state.json it writes, the loop the machines' states, and it
// turns them into gauges and counters of a prometheus::Registry. Serving them over HTTP is
// MetricsServer's (metrics_server.h); nothing here opens a socket, so tests feed records and
// read Text(). The metrics and what each means: docs/mitra-run.md#prometheus-metrics.
//
//   mitra_step, mitra_loss, mitra_samples_per_second   the last step (rank 0's step record)
//   mitra_generation, mitra_world_size, ...            the current shape (launch, state.json)
//   mitra_failures_total, mitra_morphs_total, ...      counted from events, since this manager
//                                                      started (a new manager starts at 0)
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "records/records.h"
#include "run/run_observer.h"

namespace prometheus {
class Counter;
class Gauge;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace mitra::report {

// The On* calls come from the manager's loop thread only (RunObserver). registry() and Text()
// may be called from any thread at any time: prometheus-cpp's metrics are atomic values, so a
// scrape never waits for the loop nor the loop for a scrape. A scrape between two updates of
// one record may see the first and not yet the second (a new step but the last loss).
class RunMetrics : public run::RunObserver {
 public:
  RunMetrics();
  ~RunMetrics() override;
  RunMetrics(const RunMetrics&) = delete;
  RunMetrics& operator=(const RunMetrics&) = delete;

  // What an exposer serves (the registry lives as long as the last holder).
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // Every metric in the Prometheus text format, as a scrape of /metrics reads them.
  std::string Text() const;

  void OnEvent(const JsonObject& record) override;
  void OnStep(const JsonObject& record) override;
  void OnState(const JsonObject& state) override;
  void OnMachines(const std::vector<manager::MachineStatus>& machines) override;

 private:
  using GaugeFamily = prometheus::Family<prometheus::Gauge>;
  using CounterFamily = prometheus::Family<prometheus::Counter>;

  void SetShape(const records::Shape& shape);
  // The member of a family labelled state=`chosen` set to 1 (added if new), the others to 0.
  void SetOnly(GaugeFamily* family, std::map<std::string, prometheus::Gauge*>* members,
               const std::string& chosen);

  std::shared_ptr<prometheus::Registry> registry_;

  prometheus::Gauge* step_;
  prometheus::Gauge* loss_;
  prometheus::Gauge* samples_per_second_;
  GaugeFamily* tokens_per_second_family_;
  prometheus::Gauge* tokens_per_second_ = nullptr;  // once a step reports tokens
  prometheus::Gauge* generation_;
  prometheus::Gauge* world_size_;
  prometheus::Gauge* stages_;
  prometheus::Gauge* replicas_;
  prometheus::Gauge* ready_workers_;
  prometheus::Gauge* last_checkpoint_step_;
  GaugeFamily* state_family_;
  std::map<std::string, prometheus::Gauge*> states_;  // by state name
  GaugeFamily* machines_family_;
  std::map<std::string, prometheus::Gauge*> machines_;  // by machine state

  prometheus::Counter* failures_;
  prometheus::Counter* morphs_;
  prometheus::Counter* restarts_;
  CounterFamily* downtime_family_;
  std::map<std::string, prometheus::Counter*> downtime_;  // by kind: morph, recovery
  prometheus::Counter* checkpoints_;
  prometheus::Counter* checkpoint_blocked_;
  prometheus::Counter* stragglers_;

  // A failure was recorded and the workers were not launched since: the next launch is a
  // restart.
  bool restart_pending_ = false;
};

}  // namespace mitra::report
