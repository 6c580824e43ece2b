#include "launcher/local_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/duration_text.h"

extern char** environ;

namespace mitra::launcher {
namespace {

constexpr size_t kMaxOutput = 1 << 20;

double MonotonicSeconds() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

// Closes what it holds on every path out of RunLocalCommand.
struct Fds {
  int fd[4] = {-1, -1, -1, -1};  // out read, out write, err read, err write
  ~Fds() {
    for (const int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  void Close(int i) {
    if (fd[i] >= 0) ::close(fd[i]);
    fd[i] = -1;
  }
};

// `program` as posix_spawnp should run it: a bare name found on `environment`'s PATH, when it
// sets one, is given as that full path (posix_spawnp searches the caller's PATH).
std::string ProgramOnPath(const std::string& program,
                          const std::map<std::string, std::string>& environment) {
  const auto path_entry = environment.find("PATH");
  if (program.find('/') != std::string::npos || path_entry == environment.end()) return program;
  const std::string& path = path_entry->second;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::string candidate =
        (end == begin ? std::string(".") : path.substr(begin, end - begin)) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return program;
}

// Reads the child's standard output and error (the read ends of `fds`) into `result`, up to
// kMaxOutput each, until both end (true) or `deadline` (monotonic seconds) passes (false).
bool CollectOutput(Fds* fds, double deadline, CommandResult* result) {
  std::string* sinks[2] = {&result->out, &result->err};
  while (fds->fd[0] >= 0 || fds->fd[2] >= 0) {
    const double left = deadline - MonotonicSeconds();
    if (left <= 0) return false;
    pollfd p[2] = {{fds->fd[0], POLLIN, 0}, {fds->fd[2], POLLIN, 0}};
    const int ready = ::poll(p, 2, static_cast<int>(left * 1000) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || p[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(p[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        if (sinks[i]->size() < kMaxOutput) sinks[i]->append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds->Close(2 * i);  // end of stream
      }
    }
  }
  return true;
}

}  // namespace

Result<CommandResult> RunLocalCommand(const std::vector<std::string>& argv,
                                      const std::map<std::string, std::string>& environment,
                                      double timeout_s) {
  if (argv.empty()) return Status::InvalidArgument("no command to run");
  Fds fds;
  if (::pipe2(fds.fd, O_CLOEXEC) != 0 || ::pipe2(fds.fd + 2, O_CLOEXEC) != 0) {
    return Status::IoError(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  std::vector<std::string> env_strings;
  for (const auto& [name, value] : environment) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> arg_pointers;
  for (std::string& a : args) arg_pointers.push_back(a.data());
  arg_pointers.push_back(nullptr);

  // posix_spawnp looks the program up on the PATH of the calling process; a PATH given in
  // `environment` is applied by giving the full path when it finds one there.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds.fd[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds.fd[3], 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (const int s : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGPIPE}) {
    sigaddset(&defaults, s);
  }
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string program = ProgramOnPath(argv[0], environment);
  pid_t pid = 0;
  const int error =
      ::posix_spawnp(&pid, program.c_str(), &actions, &attributes, arg_pointers.data(),
                     environment.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) {
    return Status::Unavailable("cannot run " + argv[0] + ": " + std::strerror(error) +
                               (error == ENOENT ? "; is it installed and on PATH?" : ""));
  }
  fds.Close(1);
  fds.Close(3);

  CommandResult result;
  const bool timed_out = !CollectOutput(&fds, MonotonicSeconds() + timeout_s, &result);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::Timeout(argv[0] + " did not finish within " + SecondsText(timeout_s) +
                           " s and was killed");
  }
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

}  // namespace mitra::launcher
