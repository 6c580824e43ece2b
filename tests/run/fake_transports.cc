#include "tests/run/fake_transports.h"

#include <signal.h>

#include <algorithm>
#include <string>
#include <utility>

#include "mitra/contract/stage_map.h"
#include "contract/variables.h"

namespace mitra::testing {
namespace {

int64_t EnvInt(const std::map<std::string, std::string>& env, const char* name) {
  const auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return 0;
  return std::stoll(it->second);
}

std::string EnvText(const std::map<std::string, std::string>& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

}  // namespace

struct FakeTransports::Host {
  std::string address;
  ScriptedProcessRunner runner;
  bool reachable = true;
  bool healthy = true;
  std::vector<Process*> processes;  // by the runner's process index
};

struct FakeTransports::Process {
  Host* host = nullptr;
  int index = 0;  // in host->runner.processes
  int rank = 0;
  int64_t generation = 0;  // MITRA_GENERATION
  int stages = 1;
  int replicas = 1;
  int64_t step = 0;  // completed steps
  int64_t beat_step = 0;  // `step` at the previous heartbeat
  int64_t max_steps = 0;
  int64_t checkpoint_every = 0;
  bool ready = false;
  bool hung = false;
  bool stopping = false;  // SIGUSR1: checkpoint and stop after the step
  bool exited = false;
};

FakeTransports::FakeTransports(ManualClock* clock, run::EventQueue* queue,
                               FakeWorkerScript script)
    : clock_(clock), queue_(queue), script_(script) {}

FakeTransports::~FakeTransports() = default;

void FakeTransports::Attach(run::RunLoopOptions* options) {
  options->next_event = [this](double wait_s) { return NextEvent(wait_s); };
  options->run_health_check = [this](std::function<void()> check) {
    After(script_.check_s, std::move(check));
  };
  options->pick_port = [this](const std::string&) -> Result<int> {
    return script_.rendezvous_port;
  };
  options->find_checkpoint = [this](const std::string& dir,
                                    std::vector<std::string>*) -> Result<checkpoint::Found> {
    if (checkpoint_step_ == 0) return Status::NotFound("no checkpoint in " + dir);
    checkpoint::Found found;
    found.step = checkpoint_step_;
    found.path = checkpoint::StepDirectory(dir, checkpoint_step_);
    return found;
  };
}

// ---- The simulation's time -----------------------------------------------------------------

void FakeTransports::At(double time, std::function<void()> action) {
  timers_.push(Timer{time, next_order_++, std::move(action)});
}

void FakeTransports::After(double delay_s, std::function<void()> action) {
  At(clock_->MonotonicSeconds() + delay_s, std::move(action));
}

std::optional<run::Event> FakeTransports::NextEvent(double wait_s) {
  if (std::optional<run::Event> event = queue_->TryPop()) return event;
  if (clock_->MonotonicSeconds() >= time_limit_) {
    timed_out_ = true;
    return run::StopRequested{SIGTERM};
  }
  const double until = std::min(clock_->MonotonicSeconds() + wait_s, time_limit_);
  while (!timers_.empty() && timers_.top().time <= until) {
    // Moving the action out leaves the time, which pop() compares, intact.
    Timer timer = std::move(const_cast<Timer&>(timers_.top()));
    timers_.pop();
    const double now = clock_->MonotonicSeconds();
    if (timer.time > now) clock_->Advance(timer.time - now);
    timer.action();
    if (std::optional<run::Event> event = queue_->TryPop()) return event;
  }
  const double now = clock_->MonotonicSeconds();
  if (until > now) clock_->Advance(until - now);
  return std::nullopt;
}

// ---- Machines ------------------------------------------------------------------------------

FakeTransports::Host& FakeTransports::HostOf(const std::string& address) {
  std::unique_ptr<Host>& host = hosts_[address];
  if (!host) {
    host = std::make_unique<Host>();
    host->address = address;
    Host* h = host.get();
    host->runner.on_start = [this, h](ScriptedProcessRunner&, int index) { OnStart(*h, index); };
    host->runner.on_signal = [this, h](ScriptedProcessRunner&, int index, int signal_number) {
      OnSignal(*h, index, signal_number);
    };
    host->runner.on_line = [this, h](ScriptedProcessRunner&, int index, const std::string& line) {
      OnLine(*h, index, line);
    };
    host->runner.can_send_lines = can_send_lines_;
  }
  return *host;
}

ScriptedProcessRunner& FakeTransports::RunnerOf(const std::string& address) {
  return HostOf(address).runner;
}

void FakeTransports::SetCanSendLines(bool can) {
  can_send_lines_ = can;
  for (auto& [address, host] : hosts_) host->runner.can_send_lines = can;
}

void FakeTransports::SetReachable(const std::string& address, bool reachable) {
  HostOf(address).reachable = reachable;
}

void FakeTransports::SetHealthy(const std::string& address, bool healthy) {
  HostOf(address).healthy = healthy;
}

void FakeTransports::FailStarts(const std::string& address, int count) {
  HostOf(address).runner.fail_starts = count;
}

void FakeTransports::LoseMachine(const std::string& address) {
  Host& host = HostOf(address);
  host.healthy = false;
  launcher::ExitStatus lost;
  lost.lost = true;
  for (Process* p : host.processes) End(*p, lost);
}

Result<launcher::ProcessRunner*> FakeTransports::RunnerFor(const manager::Machine& machine) {
  Host& host = HostOf(machine.Address());
  if (!host.reachable) {
    return Status::Unavailable("cannot reach " + machine.Address() + " (scripted)");
  }
  return &host.runner;
}

Status FakeTransports::Check(const manager::Machine& machine, double) {
  std::lock_guard<std::mutex> lock(check_mu_);  // mitra run checks its machines in parallel
  ++checks_;
  if (HostOf(machine.Address()).healthy) return Status::Ok();
  return Status::Unavailable("ssh to " + machine.Address() + " failed (scripted)");
}

Status FakeTransports::KillOrphan(const manager::Machine&, int64_t, const std::string&) {
  return Status::Ok();
}

std::string FakeTransports::WorkerAddress(const manager::Machine& machine) const {
  return machine.IsLocal() ? "127.0.0.1" : machine.host;
}

// ---- Workers -------------------------------------------------------------------------------

int FakeTransports::running() const {
  return static_cast<int>(std::count_if(processes_.begin(), processes_.end(),
                                         [](const auto& p) { return !p->exited; }));
}

std::vector<std::map<std::string, std::string>> FakeTransports::Environments() const {
  std::vector<std::map<std::string, std::string>> out;
  for (const auto& p : processes_) {
    out.push_back(p->host->runner.processes[p->index].spec.environment);
  }
  return out;
}

FakeTransports::Process* FakeTransports::Newest(int rank) {
  for (auto it = processes_.rbegin(); it != processes_.rend(); ++it) {
    if ((*it)->rank == rank && !(*it)->exited) return it->get();
  }
  return nullptr;
}

void FakeTransports::Crash(int rank, int exit_code, std::vector<std::string> last_lines) {
  if (Process* p = Newest(rank)) {
    launcher::ExitStatus exit;
    exit.exit_code = exit_code;
    End(*p, exit, std::move(last_lines));
  }
}

void FakeTransports::Hang(int rank) {
  if (Process* p = Newest(rank)) p->hung = true;
}

void FakeTransports::Say(int rank, const std::string& json) {
  if (Process* p = Newest(rank)) Say(*p, json);
}

void FakeTransports::OnStart(Host& host, int index) {
  const std::map<std::string, std::string>& env = host.runner.processes[index].spec.environment;
  auto process = std::make_unique<Process>();
  Process& p = *process;
  p.host = &host;
  p.index = index;
  p.rank = static_cast<int>(EnvInt(env, contract::kRank));
  p.generation = EnvInt(env, contract::kGeneration);
  // "0,2;1,3;" or "2x2" (mitra/contract/stage_map.h); counted, not parsed: at 10,000 ranks every
  // process would parse a 49 KB map.
  const std::string map = EnvText(env, contract::kStageToRankMap);
  if (map.find('x') != std::string::npos) {
    p.stages = contract::StageMap::Parse(map).value().num_stages();
  } else {
    p.stages = std::max<int>(1, static_cast<int>(std::count(map.begin(), map.end(), ';')));
  }
  p.replicas = std::max<int>(1, static_cast<int>(EnvInt(env, contract::kWorldSize)) / p.stages);
  p.step = EnvInt(env, contract::kResumeStep);
  p.max_steps = EnvInt(env, contract::kMaxSteps);
  p.checkpoint_every = EnvInt(env, contract::kCheckpointEvery);
  if (static_cast<int>(host.processes.size()) <= index) host.processes.resize(index + 1);
  host.processes[index] = &p;
  processes_.push_back(std::move(process));
  if (!script_.keep_environments) host.runner.processes[index].spec.environment.clear();
  After(script_.ready_after_s, [this, &p] { Ready(p); });
  if (p.rank == script_.fail_rank) {
    After(script_.fail_after_s, [this, &p] {
      launcher::ExitStatus exit;
      exit.exit_code = script_.fail_exit_code;
      End(p, exit, script_.fail_lines);
    });
  }
}

void FakeTransports::OnSignal(Host& host, int index, int signal_number) {
  Process& p = *host.processes.at(index);
  signals_.emplace_back(p.rank, signal_number);
  launcher::ExitStatus killed;
  killed.signal = signal_number;
  if (signal_number == SIGKILL) {
    End(p, killed);
  } else if (p.hung) {
    // A stopped process acts on nothing but SIGKILL.
  } else if (signal_number == SIGUSR1 && p.ready) {
    p.stopping = true;
  } else {
    End(p, killed);  // SIGTERM, or SIGUSR1 before the handler is installed
  }
  if (on_signal) on_signal(host.address, p.rank, signal_number);
}

void FakeTransports::OnLine(Host& host, int index, const std::string& line) {
  Process& p = *host.processes.at(index);
  lines_.emplace_back(p.rank, line);
  if (on_line) on_line(host.address, p.rank, line);
}

void FakeTransports::Ready(Process& p) {
  if (p.exited || p.hung) return;
  p.ready = true;
  Say(p, "{\"event\":\"ready\",\"rank\":" + std::to_string(p.rank) +
             ",\"stages\":" + std::to_string(p.stages) +
             ",\"replicas\":" + std::to_string(p.replicas) +
             ",\"generation\":" + std::to_string(p.generation) + "}");
  Heartbeat(p);
  After(script_.step_s, [this, &p] { Step(p); });
}

void FakeTransports::Heartbeat(Process& p) {
  if (p.exited || p.hung || script_.heartbeat_s <= 0) return;
  std::string beat = "{\"event\":\"heartbeat\",\"rank\":" + std::to_string(p.rank);
  if (p.step > p.beat_step) {  // the steps since the last one: 80% compute, 20% waiting
    beat += ",\"steps\":" + std::to_string(p.step - p.beat_step) +
            ",\"step\":" + std::to_string(p.step) +
            ",\"compute_s\":" + std::to_string(0.8 * script_.step_s) +
            ",\"wait_s\":" + std::to_string(0.2 * script_.step_s);
    p.beat_step = p.step;
  }
  Say(p, beat + "}");
  After(script_.heartbeat_s, [this, &p] { Heartbeat(p); });
}

void FakeTransports::Step(Process& p) {
  if (p.exited || p.hung) return;
  ++p.step;
  const std::string step = std::to_string(p.step);
  if (p.rank == 0) {
    const double loss = 4.0 / (1.0 + 0.1 * static_cast<double>(p.step));
    Say(p, "{\"event\":\"step\",\"step\":" + step + ",\"loss\":" + std::to_string(loss) +
               ",\"samples\":16,\"samples_per_s\":" + std::to_string(16 / script_.step_s) +
               ",\"step_time_s\":" + std::to_string(script_.step_s) +
               ",\"stages\":" + std::to_string(p.stages) +
               ",\"replicas\":" + std::to_string(p.replicas) +
               ",\"generation\":" + std::to_string(p.generation) + "}");
  }
  const bool last = p.max_steps > 0 && p.step >= p.max_steps;
  const bool periodic = p.checkpoint_every > 0 && p.step % p.checkpoint_every == 0;
  if (p.rank == 0 && (last || p.stopping || periodic)) {
    checkpoint_step_ = p.step;
    Say(p, "{\"event\":\"checkpoint\",\"step\":" + step +
               ",\"path\":\"step-" + step + "\",\"blocked_s\":0.01,\"total_s\":0.1}");
  }
  if (last || p.stopping) {
    Say(p, "{\"event\":\"stopped\",\"step\":" + step + ",\"reason\":\"" +
               (last ? "max_steps" : "signal") + "\"}");
    End(p, launcher::ExitStatus{});
    return;
  }
  After(script_.step_s, [this, &p] { Step(p); });
}

void FakeTransports::Say(Process& p, const std::string& json) {
  if (!p.exited) p.host->runner.Message(p.index, json);
}

void FakeTransports::End(Process& p, launcher::ExitStatus exit,
                         std::vector<std::string> last_lines) {
  if (p.exited) return;
  p.exited = true;
  p.host->runner.End(p.index, exit, std::move(last_lines));
}

}  // namespace mitra::testing
