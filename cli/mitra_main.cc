// mitra: the command-line entry point. Builds the real seams and hands each command to its
// file in cli/ (run_command.h, planner_commands.h, ...); what decides lives in the libraries.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cli/checkpoint_command.h"
#include "cli/control_command.h"
#include "cli/planner_commands.h"
#include "cli/report_command.h"
#include "cli/run_command.h"
#include "cli/run_options.h"
#include "common/clock.h"
#include "common/file_system.h"
#include "common/signal_watcher.h"
#include "mitra/contract/placement.h"
#include "launcher/local_process_runner.h"
#include "manager/control_requests.h"
#include "manager/status_report.h"
#include "report/metrics.h"
#include "report/metrics_server.h"
#include "run/control_socket.h"
#include "run/machine_list_watcher.h"
#include "run/machine_transports.h"
#include "run/run_loop.h"

namespace {

using mitra::contract::ProcessEnvironment;

// A manager keeps a descriptor per worker (its log file, and its pipes or its host's SSH
// socket): 10,000 ranks pass the usual soft limit of 1,024. Raise it to the hard limit.
void RaiseOpenFileLimit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// SSH's settings for the machines, from `mitra run`'s or `mitra profile`'s flags.
mitra::run::MachineTransportsOptions SshOptions(const std::string& known_hosts,
                                                const std::string& identity) {
  mitra::run::MachineTransportsOptions options;
  options.known_hosts = known_hosts;
  options.identity = identity;
  return options;
}

// The control socket of a running `mitra run`: answers `mitra status` from the loop's snapshot
// and turns `mitra stop` and `mitra drain` into events. The server's thread asks for the status
// while the main thread sets the loop: both go through `mu_`.
class ControlPlane {
 public:
  explicit ControlPlane(mitra::run::EventQueue* events) : events_(events) {}

  void SetLoop(mitra::run::RunLoop* loop) {
    std::lock_guard<std::mutex> lock(mu_);
    loop_ = loop;
  }

  // Makes this manager the only one on `run_dir` (RunContext::claim_run_dir).
  mitra::Status Claim(const std::string& run_dir) {
    using namespace mitra;
    manager::ControlRequests::Hooks hooks;
    hooks.stop = [this] { events_->Push(run::StopRequested{0}); };
    hooks.drain = [this](const std::string& address) {
      events_->Push(manager::DrainMachine{address, "mitra drain"});
    };
    hooks.status = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return loop_ ? loop_->Status() : JsonObject().SetString("state", "starting");
    };
    requests_ = std::make_unique<manager::ControlRequests>(hooks, run_dir, ::getpid());
    server_ = std::make_unique<run::ControlServer>(
        run::ControlSocketPath(run_dir),
        [this](const JsonObject& request) { return requests_->Answer(request); });
    return server_->Start();
  }

  void Stop() {
    if (server_) server_->Stop();
  }

 private:
  mitra::run::EventQueue* events_;
  std::mutex mu_;
  mitra::run::RunLoop* loop_ = nullptr;  // guarded by mu_
  std::unique_ptr<mitra::manager::ControlRequests> requests_;
  std::unique_ptr<mitra::run::ControlServer> server_;
};

int Run(const mitra::cli::RunOptions& options) {
  using namespace mitra;
  // A closed terminal or pipe must not kill the manager before it has stopped its workers.
  ::signal(SIGPIPE, SIG_IGN);
  RaiseOpenFileLimit();

  PosixFileSystem fs;
  SystemClock clock;
  run::EventQueue events;
  Result<std::unique_ptr<SignalWatcher>> watcher = SignalWatcher::Start(
      {SIGINT, SIGTERM},
      [&events](int signal_number) { events.Push(run::StopRequested{signal_number}); });
  if (!watcher.ok()) {
    std::cerr << "mitra run: " << watcher.status().message() << std::endl;
    return kExitFailed;
  }
  // Declared after `events`: destroyed first, so its last events still have a queue. Its
  // destructor kills any worker still running.
  launcher::LocalProcessRunner runner(&fs);
  run::MachineTransportsOptions transport_options = SshOptions(options.known_hosts, options.identity);
  if (options.launcher == cli::Launcher::kSrun) {
    // RunCommand refuses srun outside an allocation before any step is started.
    launcher::SrunOptions srun;
    srun.environment = ProcessEnvironment();
    const auto job = srun.environment.find("SLURM_JOB_ID");
    if (job != srun.environment.end()) srun.job_id = job->second;
    transport_options.srun = srun;
  }
  run::MachineTransports transports(transport_options, &runner, &fs);

  // The machine list, watched from the moment it is read: every edit becomes an event.
  std::unique_ptr<run::MachineListWatcher> list_watcher;
  ControlPlane control(&events);

  cli::RunContext context;
  context.fs = &fs;
  context.clock = &clock;
  context.runner = &runner;
  context.transports = &transports;
  context.events = &events;
  context.watch_machine_list = [&](const std::string& path, const std::string& contents) {
    run::WatcherOptions watch;
    watch.baseline = contents;
    list_watcher = std::make_unique<run::MachineListWatcher>(
        path, watch, [&events](const std::string& text) {
          events.Push(run::MachineListEdited{text});
        });
    return list_watcher->Start();
  };
  context.on_loop_started = [&control](run::RunLoop* started) { control.SetLoop(started); };
  context.claim_run_dir = [&control](const std::string& run_dir) { return control.Claim(run_dir); };
  // --metrics-port: the run's Prometheus metrics, served from the exposer's own thread.
  // Declared before the server, so it outlives it.
  report::RunMetrics metrics;
  std::unique_ptr<report::MetricsServer> metrics_server;
  if (options.metrics_port > 0) {
    context.observer = &metrics;
    context.serve_metrics = [&]() -> Status {
      Result<std::unique_ptr<report::MetricsServer>> server = report::MetricsServer::Start(
          options.metrics_address, static_cast<int>(options.metrics_port), metrics);
      if (!server.ok()) return server.status();
      metrics_server = std::move(server).value();
      return Status::Ok();
    };
  }
  context.environment = ProcessEnvironment();
  context.working_directory = CurrentDirectory();
  context.manager_pid = static_cast<int>(::getpid());
  context.out = &std::cout;
  context.err = &std::cerr;
  const int code = cli::RunCommand(options, context);
  if (list_watcher) list_watcher->Stop();
  // Before the control socket goes (what `mitra stop --wait` waits for), so that a manager
  // started next finds the port free. civetweb's stop waits out its listener's poll: about 2 s.
  metrics_server.reset();
  control.Stop();
  return code;
}

// A command's exit code when there is nothing to run: a message for bad input (2), or the help
// text (0). nullopt: run it.
template <class Options>
std::optional<int> BadInputOrHelp(const mitra::Result<Options>& options) {
  if (!options.ok()) {
    std::cerr << options.status().message() << std::endl;
    return mitra::kExitBadInput;
  }
  if (!options->help_text.empty()) {
    std::cout << options->help_text;
    return mitra::kExitOk;
  }
  return std::nullopt;
}

// `mitra profile` and `mitra plan`, with the real seams.
int Planning(mitra::cli::CommandKind kind, const std::vector<std::string>& args) {
  using namespace mitra;
  const bool profile = kind == cli::CommandKind::kProfile;
  ::signal(SIGPIPE, SIG_IGN);
  PosixFileSystem fs;
  SystemClock clock;
  cli::CommandContext context;
  context.fs = &fs;
  context.clock = &clock;
  context.environment = ProcessEnvironment();
  context.working_directory = CurrentDirectory();
  context.out = &std::cout;
  context.err = &std::cerr;
  if (!profile) {
    Result<cli::PlanCommandOptions> options = cli::ParsePlanCommand(args);
    if (const std::optional<int> code = BadInputOrHelp(options)) return *code;
    return cli::PlanCommand(*options, context);
  }
  Result<cli::ProfileCommandOptions> options = cli::ParseProfileCommand(args);
  if (const std::optional<int> code = BadInputOrHelp(options)) return *code;
  launcher::LocalProcessRunner runner(&fs);
  const run::MachineTransportsOptions transport_options =
      SshOptions(options->known_hosts, options->identity);
  run::MachineTransports transports(transport_options, &runner, &fs);
  context.runner = &runner;
  context.transports = &transports;
  return cli::ProfileCommand(*options, context);
}

}  // namespace

int main(int argc, char** argv) {
  using mitra::cli::CommandKind;
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "status" || args[0] == "stop" || args[0] == "drain")) {
    return mitra::cli::ControlCommand(args, std::cout, std::cerr);
  }
  mitra::Result<mitra::cli::Command> command = mitra::cli::ParseCommandLine(args);
  if (!command.ok()) {
    std::cerr << command.status().message() << std::endl;
    return mitra::kExitBadInput;
  }
  switch (command->kind) {
    case CommandKind::kHelp:
      std::cout << command->help_text;
      return mitra::kExitOk;
    case CommandKind::kVersion:
      std::cout << "mitra " << MITRA_VERSION << std::endl;
      return mitra::kExitOk;
    case CommandKind::kRun:
      return Run(command->run);
    case CommandKind::kCheckpoint:
      return mitra::cli::CheckpointCommand(command->checkpoint, std::cout, std::cerr);
    case CommandKind::kReport: {
      mitra::PosixFileSystem fs;
      mitra::SystemClock clock;
      return mitra::cli::ReportCommand(command->report, fs, clock, std::cout, std::cerr);
    }
    case CommandKind::kProfile:
    case CommandKind::kPlan:
      return Planning(command->kind, command->args);
  }
  return mitra::kExitFailed;
}
