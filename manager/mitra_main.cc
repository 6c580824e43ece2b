// mitra: the manager's command-line entry point. Builds the real seams and hands over to
// RunCommand; everything that decides lives in the mitra_manager library.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/file_system.h"
#include "common/signal_watcher.h"
#include "contract/placement.h"
#include "launcher/local_process_runner.h"
#include "manager/checkpoint_command.h"
#include "manager/control_command.h"
#include "manager/control_requests.h"
#include "manager/control_socket.h"
#include "manager/machine_list_watcher.h"
#include "manager/machine_transports.h"
#include "manager/metrics.h"
#include "manager/metrics_server.h"
#include "manager/planner_commands.h"
#include "manager/report_command.h"
#include "manager/run_loop.h"
#include "manager/status_report.h"
#include "manager/run_command.h"
#include "manager/run_options.h"

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

int Run(const mitra::manager::RunOptions& options) {
  using namespace mitra;
  // A closed terminal or pipe must not kill the manager before it has stopped its workers.
  ::signal(SIGPIPE, SIG_IGN);
  RaiseOpenFileLimit();

  PosixFileSystem fs;
  SystemClock clock;
  manager::EventQueue events;
  Result<std::unique_ptr<SignalWatcher>> watcher = SignalWatcher::Start(
      {SIGINT, SIGTERM},
      [&events](int signal_number) { events.Push(manager::StopRequested{signal_number}); });
  if (!watcher.ok()) {
    std::cerr << "mitra run: " << watcher.status().message() << std::endl;
    return manager::kExitFailed;
  }
  // Declared after `events`: destroyed first, so its last events still have a queue. Its
  // destructor kills any worker still running.
  launcher::LocalProcessRunner runner(&fs);
  manager::MachineTransportsOptions transport_options;
  transport_options.known_hosts = options.known_hosts;
  transport_options.identity = options.identity;
  if (options.launcher == manager::Launcher::kSrun) {
    // RunCommand refuses srun outside an allocation before any step is started.
    launcher::SrunOptions srun;
    srun.environment = ProcessEnvironment();
    const auto job = srun.environment.find("SLURM_JOB_ID");
    if (job != srun.environment.end()) srun.job_id = job->second;
    transport_options.srun = srun;
  }
  manager::MachineTransports transports(transport_options, &runner, &fs);

  // The machine list, watched from the moment it is read: every edit becomes an event.
  std::unique_ptr<manager::MachineListWatcher> list_watcher;
  // The control socket answers `mitra status` from the loop's snapshot and turns `mitra stop`
  // into the same event as Ctrl-C.
  std::mutex loop_mu;
  manager::RunLoop* loop = nullptr;  // guarded by loop_mu
  std::unique_ptr<manager::ControlRequests> requests;
  std::unique_ptr<manager::ControlServer> control;

  manager::RunContext context;
  context.fs = &fs;
  context.clock = &clock;
  context.runner = &runner;
  context.transports = &transports;
  context.events = &events;
  context.watch_machine_list = [&](const std::string& path, const std::string& contents) {
    manager::WatcherOptions watch;
    watch.baseline = contents;
    list_watcher = std::make_unique<manager::MachineListWatcher>(
        path, watch, [&events](const std::string& text) {
          events.Push(manager::MachineListEdited{text});
        });
    return list_watcher->Start();
  };
  context.on_loop_started = [&](manager::RunLoop* started) {
    std::lock_guard<std::mutex> lock(loop_mu);
    loop = started;
  };
  context.claim_run_dir = [&](const std::string& run_dir) {
    manager::ControlRequests::Hooks hooks;
    hooks.stop = [&events] { events.Push(manager::StopRequested{0}); };
    hooks.drain = [&events](const std::string& address) {
      events.Push(manager::DrainMachine{address, "mitra drain"});
    };
    hooks.status = [&] {
      std::lock_guard<std::mutex> lock(loop_mu);
      return loop ? loop->Status() : JsonObject().SetString("state", "starting");
    };
    requests = std::make_unique<manager::ControlRequests>(hooks, run_dir, ::getpid());
    control = std::make_unique<manager::ControlServer>(
        manager::ControlSocketPath(run_dir),
        [&](const JsonObject& request) { return requests->Answer(request); });
    return control->Start();
  };
  // --metrics-port: the run's Prometheus metrics, served from the exposer's own thread.
  // Declared before the server, so it outlives it.
  manager::RunMetrics metrics;
  std::unique_ptr<manager::MetricsServer> metrics_server;
  if (options.metrics_port > 0) {
    context.observer = &metrics;
    context.serve_metrics = [&]() -> Status {
      Result<std::unique_ptr<manager::MetricsServer>> server = manager::MetricsServer::Start(
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
  const int code = manager::RunCommand(options, context);
  if (list_watcher) list_watcher->Stop();
  // Before the control socket goes (what `mitra stop --wait` waits for), so that a manager
  // started next finds the port free. civetweb's stop waits out its listener's poll: about 2 s.
  metrics_server.reset();
  if (control) control->Stop();
  return code;
}

// `mitra profile` and `mitra plan`, with the real seams.
int Planning(mitra::manager::CommandKind kind, const std::vector<std::string>& args) {
  using namespace mitra;
  const bool profile = kind == manager::CommandKind::kProfile;
  ::signal(SIGPIPE, SIG_IGN);
  PosixFileSystem fs;
  SystemClock clock;
  manager::CommandContext context;
  context.fs = &fs;
  context.clock = &clock;
  context.environment = ProcessEnvironment();
  context.working_directory = CurrentDirectory();
  context.out = &std::cout;
  context.err = &std::cerr;
  if (!profile) {
    Result<manager::PlanCommandOptions> options = manager::ParsePlanCommand(args);
    if (!options.ok()) {
      std::cerr << options.status().message() << std::endl;
      return manager::kExitBadInput;
    }
    if (!options->help_text.empty()) {
      std::cout << options->help_text;
      return manager::kExitOk;
    }
    return manager::PlanCommand(*options, context);
  }
  Result<manager::ProfileCommandOptions> options = manager::ParseProfileCommand(args);
  if (!options.ok()) {
    std::cerr << options.status().message() << std::endl;
    return manager::kExitBadInput;
  }
  if (!options->help_text.empty()) {
    std::cout << options->help_text;
    return manager::kExitOk;
  }
  launcher::LocalProcessRunner runner(&fs);
  manager::MachineTransportsOptions transport_options;
  transport_options.known_hosts = options->known_hosts;
  transport_options.identity = options->identity;
  manager::MachineTransports transports(transport_options, &runner, &fs);
  context.runner = &runner;
  context.transports = &transports;
  return manager::ProfileCommand(*options, context);
}

}  // namespace

int main(int argc, char** argv) {
  using mitra::manager::CommandKind;
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "status" || args[0] == "stop" || args[0] == "drain")) {
    return mitra::manager::ControlCommand(args, std::cout, std::cerr);
  }
  mitra::Result<mitra::manager::Command> command = mitra::manager::ParseCommandLine(args);
  if (!command.ok()) {
    std::cerr << command.status().message() << std::endl;
    return mitra::manager::kExitBadInput;
  }
  switch (command->kind) {
    case CommandKind::kHelp:
      std::cout << command->help_text;
      return mitra::manager::kExitOk;
    case CommandKind::kVersion:
      std::cout << "mitra " << MITRA_VERSION << std::endl;
      return mitra::manager::kExitOk;
    case CommandKind::kRun:
      return Run(command->run);
    case CommandKind::kCheckpoint:
      return mitra::manager::CheckpointCommand(command->checkpoint, std::cout, std::cerr);
    case CommandKind::kReport: {
      mitra::PosixFileSystem fs;
      mitra::SystemClock clock;
      return mitra::manager::ReportCommand(command->report, fs, clock, std::cout, std::cerr);
    }
    case CommandKind::kProfile:
    case CommandKind::kPlan:
      return Planning(command->kind, command->args);
  }
  return mitra::manager::kExitFailed;
}
