// mitra: the manager's command-line entry point. Builds the real seams and hands over to
// RunCommand; everything that decides lives in the mitra_manager library.
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/file_system.h"
#include "common/free_port.h"
#include "common/signal_watcher.h"
#include "launcher/local_process_runner.h"
#include "manager/checkpoint_command.h"
#include "manager/control_command.h"
#include "manager/run_command.h"
#include "manager/run_options.h"

extern char** environ;

namespace {

mitra::manager::Environment ProcessEnvironment() {
  mitra::manager::Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const size_t eq = text.find('=');
    if (eq != std::string::npos) env[text.substr(0, eq)] = text.substr(eq + 1);
  }
  return env;
}

std::string WorkingDirectory() {
  std::vector<char> buffer(4096);
  while (::getcwd(buffer.data(), buffer.size()) == nullptr) {
    if (errno != ERANGE) return ".";
    buffer.resize(buffer.size() * 2);
  }
  return buffer.data();
}

int Run(const mitra::manager::RunOptions& options) {
  using namespace mitra;
  // A closed terminal or pipe must not kill the manager before it has stopped its workers.
  ::signal(SIGPIPE, SIG_IGN);

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

  manager::RunContext context;
  context.fs = &fs;
  context.clock = &clock;
  context.runner = &runner;
  context.events = &events;
  context.pick_port = [] { return PickFreeTcpPort("127.0.0.1"); };
  context.environment = ProcessEnvironment();
  context.working_directory = WorkingDirectory();
  context.manager_pid = static_cast<int>(::getpid());
  context.out = &std::cout;
  context.err = &std::cerr;
  return manager::RunCommand(options, context);
}

}  // namespace

int main(int argc, char** argv) {
  using mitra::manager::CommandKind;
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "status" || args[0] == "stop")) {
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
  }
  return mitra::manager::kExitFailed;
}
