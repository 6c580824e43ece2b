#include "tests/common/run_helpers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/strings.h"
#include "contract/worker_messages.h"

extern char** environ;

namespace mitra::testing {
namespace {

double Now() {
  using std::chrono::duration;
  return duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void SleepBriefly() { std::this_thread::sleep_for(std::chrono::milliseconds(10)); }

}  // namespace

std::string MakeTempDir(const std::string& prefix) {
  std::string pattern =
      (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("cannot make a directory " + pattern + ": " + std::strerror(errno));
  }
  return pattern;
}

TempDir::TempDir() : path_(MakeTempDir("mitra-test")) {}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::Write(const std::string& name, const std::string& contents) const {
  const std::string path = Path(name);
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

std::unique_ptr<MitraProcess> MitraProcess::Start(const std::string& binary,
                                                  const std::vector<std::string>& args,
                                                  const std::string& working_dir,
                                                  const std::map<std::string, std::string>& env) {
  std::unique_ptr<MitraProcess> p(new MitraProcess());
  p->capture_dir_ = std::make_unique<TempDir>();
  p->out_path_ = p->capture_dir_->Path("stdout");
  p->err_path_ = p->capture_dir_->Path("stderr");

  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv_storage = {binary};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_storage;
  for (const auto& [k, v] : merged) env_storage.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  const int out_fd = ::open(p->out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = ::open(p->err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0 || err_fd < 0) {
    std::perror("open capture file");
    return nullptr;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(working_dir.c_str()) != 0) ::_exit(126);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  if (pid < 0) {
    std::perror("fork");
    return nullptr;
  }
  p->pid_ = pid;
  return p;
}

MitraProcess::~MitraProcess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    Reap(0);
  }
}

bool MitraProcess::Reap(int options) {
  if (reaped_) return true;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status_, options);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) reaped_ = true;
  return reaped_;
}

std::string MitraProcess::Stdout() const { return ReadFileOrEmpty(out_path_); }
std::string MitraProcess::Stderr() const { return ReadFileOrEmpty(err_path_); }

bool MitraProcess::WaitForStdout(const std::string& text, double timeout_s, size_t count) {
  const auto seen = [&] {
    const std::string out = Stdout();
    size_t found = 0;
    for (size_t at = out.find(text); at != std::string::npos && found < count;
         at = out.find(text, at + text.size())) {
      ++found;
    }
    return found >= count;
  };
  const double deadline = Now() + timeout_s;
  while (Now() < deadline) {
    if (seen()) return true;
    if (Reap(WNOHANG)) return seen();
    SleepBriefly();
  }
  return false;
}

void MitraProcess::Signal(int signal_number) {
  if (!reaped_) ::kill(pid_, signal_number);
}

MitraResult MitraProcess::Wait(double timeout_s) {
  MitraResult result;
  const double deadline = Now() + timeout_s;
  while (!Reap(WNOHANG) && Now() < deadline) SleepBriefly();
  if (!reaped_) {
    result.timed_out = true;
    ::kill(pid_, SIGKILL);
    Reap(0);
  }
  if (WIFEXITED(status_)) result.exit_code = WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) result.term_signal = WTERMSIG(status_);
  result.out = Stdout();
  result.err = Stderr();
  return result;
}

MitraResult RunProgram(const std::string& binary, const std::vector<std::string>& args,
                       const std::string& working_dir, double timeout_s,
                       const std::map<std::string, std::string>& env) {
  std::unique_ptr<MitraProcess> p = MitraProcess::Start(binary, args, working_dir, env);
  if (!p) return MitraResult{};
  return p->Wait(timeout_s);
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<JsonObject> ReadJsonLines(const std::string& path) {
  std::vector<JsonObject> records;
  const std::string text = ReadFileOrEmpty(path);
  for (const std::string_view line : SplitLines(text)) {
    if (Trim(line).empty()) continue;
    Result<JsonObject> parsed = JsonObject::Parse(line);
    records.push_back(parsed.ok() ? std::move(parsed).value()
                                  : JsonObject().SetString("unparsed", std::string(line)));
  }
  return records;
}

std::vector<JsonObject> WorkerRecords(std::string_view log_text) {
  constexpr std::string_view kPrefix = contract::kMessagePrefix;
  std::vector<JsonObject> records;
  for (const std::string_view line : SplitLines(log_text)) {
    if (line.substr(0, kPrefix.size()) != kPrefix) continue;
    if (Result<JsonObject> record = JsonObject::Parse(line.substr(kPrefix.size())); record.ok()) {
      records.push_back(std::move(record).value());
    }
  }
  return records;
}

std::optional<JsonObject> ReadJsonFile(const std::string& path) {
  Result<JsonObject> parsed = JsonObject::Parse(ReadFileOrEmpty(path));
  if (!parsed.ok()) return std::nullopt;
  return std::move(parsed).value();
}

std::vector<JsonObject> EventsNamed(const std::string& run_dir, const std::string& name) {
  std::vector<JsonObject> out;
  for (JsonObject& record : ReadJsonLines(run_dir + "/events.jsonl")) {
    if (record.GetString("event") == name) out.push_back(std::move(record));
  }
  return out;
}

std::vector<pid_t> LaunchPids(const JsonObject& launch) {
  std::vector<pid_t> pids;
  const JsonValue* array = launch.Find("pids");
  if (array == nullptr) return pids;
  std::string digits;
  for (const char c : array->string_value() + ",") {
    if (c >= '0' && c <= '9') {
      digits += c;
    } else if (!digits.empty()) {
      if (std::stol(digits) > 0) pids.push_back(static_cast<pid_t>(std::stol(digits)));
      digits.clear();
    }
  }
  return pids;
}

std::vector<pid_t> LaunchedPids(const std::string& run_dir) {
  std::vector<pid_t> pids;
  for (const JsonObject& launch : EventsNamed(run_dir, "launch")) {
    const std::vector<pid_t> these = LaunchPids(launch);
    pids.insert(pids.end(), these.begin(), these.end());
  }
  return pids;
}

bool ProcessGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace mitra::testing
