// bench/manager_scale: the manager's loop and controller at 1,250 machines x 8 slots, by
// simulation.
//
// RunLoop and a real Controller run a job on FakeTransports (tests/run/fake_transports.h):
// simulated workers that send a heartbeat every second, train a step every second (rank 0 prints
// `step`) and checkpoint on SIGUSR1, on a manual clock and an in-memory file system. Time jumps
// from one scripted instant to the next, so the figures are the manager's own CPU cost, not
// waiting. One job per size, each in a process of its own (for its peak RSS):
//
//   running   every rank ready, then --seconds of training
//   edit      the machine list loses its last machine: time from the edit reaching the loop to
//             the first and the last SIGUSR1 of the morph; the new generation runs --seconds
//   failure   a rank exits with code 1: time from its exit reaching the loop to the first and
//             the last signal to the others; the next generation runs --seconds; then a stop
//
// and one line for what the SSH launcher's per-host I/O threads cost at --machines hosts (the
// runners are created, which starts their threads, and nothing connects).
//
// Usage: manager_scale [--machines 1250] [--slots 8] [--baseline-machines 8] [--seconds 10]
// (--help lists them).
// Prints one JSON line per measurement, then a summary line comparing the sizes.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/file_system.h"
#include "common/json.h"
#include "common/strings.h"
#include "launcher/ssh_process_runner.h"
#include "manager/status_report.h"
#include "run/run_loop.h"
#include "tests/common/memory_file_system.h"
#include "tests/run/fake_transports.h"

namespace mitra::run {
namespace {

using testing::FakeTransports;
using testing::MemoryFileSystem;

struct Flags {
  int machines = 1250;
  int slots = 8;
  int baseline_machines = 8;
  double seconds = 10;
};

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A field of /proc/self/status in kB ("VmHWM", "VmRSS", "VmSize") or a count ("Threads").
int64_t ProcStatus(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, field.size() + 1, field + ":") == 0) {
      return std::atoll(line.c_str() + field.size() + 1);
    }
  }
  return -1;
}

int64_t OpenFiles() {
  int64_t n = 0;
  for (int fd = 0; fd < 65536; ++fd) n += ::fcntl(fd, F_GETFD) != -1 ? 1 : 0;
  return n;
}

std::string ListText(int machines, int slots) {
  std::string text;
  for (int m = 1; m <= machines; ++m) {
    text += "node" + std::to_string(m) + " slots=" + std::to_string(slots) + "\n";
  }
  return text;
}

// Which kind of event the loop was handed, for per-kind costs.
enum Kind { kHeartbeat, kStep, kOtherRecord, kExit, kListEdit, kTimer, kOther, kKinds };
const char* const kKindNames[kKinds] = {"heartbeat", "step", "other_record", "exit",
                                        "list_edit", "timer", "other"};

Kind KindOf(const std::optional<Event>& event) {
  if (!event) return kTimer;
  if (const WorkerEvent* w = std::get_if<WorkerEvent>(&*event)) {
    if (w->event.kind == launcher::ProcessEvent::Kind::kExited) return kExit;
    if (w->event.message.find("\"heartbeat\"") != std::string::npos) return kHeartbeat;
    if (w->event.message.find("\"step\"") != std::string::npos) return kStep;
    return kOtherRecord;
  }
  if (std::holds_alternative<MachineListEdited>(*event)) return kListEdit;
  return kOther;
}

// What the loop did between handing out events: its CPU time per kind of event, the longest
// single event, and the latencies from a marked event to the signals it caused.
struct Meter {
  int64_t count[kKinds] = {};
  double cpu_s[kKinds] = {};
  double fake_cpu_s = 0;  // inside the simulation: timers, simulated workers, queue pushes
  double max_event_s = 0;
  std::string max_event_kind;

  // Latency of the reaction to one event (the list edit, the rank's exit).
  struct Reaction {
    double at = -1;  // steady seconds when the loop got the event
    double first_signal = -1, last_signal = -1;
    int signals = 0;
  };
  Reaction edit, failure;
  Reaction* open = nullptr;  // the reaction whose signals are being counted

  Kind last_kind = kOther;
  double last_return_cpu = -1;
};

JsonObject ReactionJson(const Meter::Reaction& r) {
  JsonObject o;
  o.SetInt("signals", r.signals);
  if (r.first_signal >= 0) {
    o.SetNumber("first_ms", (r.first_signal - r.at) * 1e3)
        .SetNumber("last_ms", (r.last_signal - r.at) * 1e3);
  }
  return o;
}

// Meters the loop's events through `options` (the time and CPU each kind costs, the largest)
// and, through `fake`, the signals that answer the list edit and the failure.
void Watch(Meter* meter, RunLoopOptions* options, FakeTransports* fake) {
  std::function<std::optional<Event>(double)> simulate = options->next_event;
  options->next_event = [meter, simulate](double wait_s) {
    const double enter_cpu = ThreadCpuSeconds();
    if (meter->last_return_cpu >= 0) {
      const double spent = enter_cpu - meter->last_return_cpu;
      meter->count[meter->last_kind] += 1;
      meter->cpu_s[meter->last_kind] += spent;
      if (spent > meter->max_event_s) {
        meter->max_event_s = spent;
        meter->max_event_kind = kKindNames[meter->last_kind];
      }
    }
    std::optional<Event> event = simulate(wait_s);
    meter->last_kind = KindOf(event);
    if (meter->last_kind == kListEdit && meter->edit.at < 0) {
      meter->edit.at = SteadySeconds();
      meter->open = &meter->edit;
    } else if (meter->last_kind == kExit && meter->failure.at < 0 && meter->edit.signals > 0 &&
               meter->open == nullptr) {
      const WorkerEvent& w = std::get<WorkerEvent>(*event);
      if (w.event.exit.exit_code == 1) {
        meter->failure.at = SteadySeconds();
        meter->open = &meter->failure;
      }
    }
    meter->last_return_cpu = ThreadCpuSeconds();
    meter->fake_cpu_s += meter->last_return_cpu - enter_cpu;
    return event;
  };
  fake->on_signal = [meter](const std::string&, int, int) {
    if (meter->open == nullptr) return;
    const double now = SteadySeconds();
    if (meter->open->first_signal < 0) meter->open->first_signal = now;
    meter->open->last_signal = now;
    meter->open->signals += 1;
  };
}

// The job's line: events and their CPU, per kind and at most, the reactions to the edit and
// the failure, `mitra status`'s cost, the run's records and the process's memory and threads.
JsonObject JobLine(const Meter& meter, int machines, int ranks, int code, double simulated_s,
                   double wall_s, const std::vector<double>& status_s, size_t status_bytes,
                   size_t events_jsonl_bytes) {
  int64_t events = 0;
  double loop_cpu_s = 0;
  for (int k = 0; k < kKinds; ++k) {
    events += meter.count[k];
    loop_cpu_s += meter.cpu_s[k];
  }
  JsonObject line;
  line.SetString("bench", "manager_scale")
      .SetString("what", "job")
      .SetInt("machines", machines)
      .SetInt("ranks", ranks)
      .SetInt("exit_code", code)
      .SetNumber("simulated_s", simulated_s)
      .SetInt("events", events)
      .SetNumber("events_per_simulated_s", static_cast<double>(events) / simulated_s)
      .SetNumber("loop_cpu_s", loop_cpu_s)
      .SetNumber("events_per_cpu_s", static_cast<double>(events) / loop_cpu_s)
      // The share of one core the manager's loop needs to keep up with the simulated job.
      .SetNumber("core_share", loop_cpu_s / simulated_s);
  JsonObject per_kind;
  for (int k = 0; k < kKinds; ++k) {
    if (meter.count[k] == 0) continue;
    per_kind.SetNumber(kKindNames[k], meter.cpu_s[k] / static_cast<double>(meter.count[k]) * 1e6);
  }
  double status_mean_s = 0;
  for (const double s : status_s) status_mean_s += s / static_cast<double>(status_s.size());
  line.Set("us_per_event", JsonValue::Raw(per_kind.ToJson()))
      .SetNumber("max_event_ms", meter.max_event_s * 1e3)
      .SetString("max_event_kind", meter.max_event_kind)
      .Set("edit_to_signals", JsonValue::Raw(ReactionJson(meter.edit).ToJson()))
      .Set("failure_to_signals", JsonValue::Raw(ReactionJson(meter.failure).ToJson()))
      .SetNumber("status_request_ms", status_mean_s * 1e3)
      .SetInt("status_bytes", static_cast<int64_t>(status_bytes / std::max<size_t>(1, status_s.size())))
      .SetNumber("simulation_cpu_s", meter.fake_cpu_s)
      .SetNumber("wall_s", wall_s)
      .SetInt("events_jsonl_bytes", static_cast<int64_t>(events_jsonl_bytes))
      .SetInt("peak_rss_kib", ProcStatus("VmHWM"))
      .SetInt("threads", ProcStatus("Threads"));
  return line;
}

// One job at `machines` x `slots`; prints its line and returns it.
JsonObject RunJob(const Flags& flags, int machines) {
  const int ranks = machines * flags.slots;
  ManualClock clock;
  MemoryFileSystem fs;
  EventQueue queue;
  testing::FakeWorkerScript script;
  script.keep_environments = false;  // RSS: the manager's, not the simulation's
  FakeTransports fake(&clock, &queue, script);
  RunDir run_dir("/runs/scale");
  if (!run_dir.Create(fs, 0).ok()) std::abort();
  Result<std::unique_ptr<RunJournal>> opened = RunJournal::Open(&fs, &clock, run_dir);
  if (!opened.ok()) std::abort();
  std::unique_ptr<RunJournal> journal = std::move(*opened);
  std::ostream null_out(nullptr);

  manager::ControllerOptions controller;
  controller.stages = 8;
  controller.segments = 8;
  controller.global_batch = ranks;
  controller.chunk_size = 1;
  controller.max_steps = 1000000;

  RunLoopOptions options;
  options.worker = WorkerProgram::Make("/opt/job/train", {}, {}, {}, "/opt/job", "");
  options.machines_path = "machines.txt";
  options.settings.placement.run_dir = run_dir.path();
  options.settings.placement.checkpoint_dir = "/runs/scale/checkpoints";
  options.settings.placement.max_steps = controller.max_steps;
  options.settings.placement.checkpoint_every = 0;
  fake.Attach(&options);

  Meter meter;
  Watch(&meter, &options, &fake);

  RunLoop loop(std::move(options), controller, &fake, &fs, &clock, &run_dir, journal.get(),
               &queue, &null_out, &null_out);

  // The script: train, lose the last machine, train, lose a rank, train, stop.
  const double t0 = clock.MonotonicSeconds();
  const double phase = flags.seconds + 3;  // 3 s for the launch and the first steps
  std::vector<double> status_s;
  size_t status_bytes = 0;
  fake.At(t0 + phase, [&] {
    meter.open = nullptr;
    queue.Push(MachineListEdited{ListText(machines - 1, flags.slots)});
  });
  fake.At(t0 + 2 * phase, [&] {
    meter.open = nullptr;
    fake.Crash(5, 1, {"fatal: simulated"});
  });
  for (int i = 1; i <= 5; ++i) {  // what `mitra status` costs the control socket's thread
    fake.At(t0 + 2 * phase - i - 0.5, [&] {
      const double begin = SteadySeconds();
      status_bytes += loop.Status().ToJson().size();
      status_s.push_back(SteadySeconds() - begin);
    });
  }
  fake.At(t0 + 3 * phase, [&] {
    meter.open = nullptr;
    queue.Push(StopRequested{0});
  });
  fake.set_time_limit(t0 + 3 * phase + 120);

  Result<manager::MachineList> list =
      manager::ParseMachineList(ListText(machines, flags.slots), "machines.txt", 1);
  if (!list.ok()) std::abort();
  const double wall_begin = SteadySeconds();
  const int code = loop.Run(*list);
  const double wall_s = SteadySeconds() - wall_begin;

  return JobLine(meter, machines, ranks, code, clock.MonotonicSeconds() - t0, wall_s, status_s,
                 status_bytes, fs.Contents(run_dir.EventsPath()).size());
}

// What the SSH launcher's runners cost at `hosts` hosts before any connection: one I/O thread
// each (launcher/ssh_process_runner.h), its stack and its descriptors.
JsonObject SshRunners(int hosts) {
  PosixFileSystem fs;
  const int64_t threads = ProcStatus("Threads");
  const int64_t rss = ProcStatus("VmRSS");
  const int64_t virt = ProcStatus("VmSize");
  const int64_t fds = OpenFiles();
  std::vector<std::unique_ptr<launcher::SshProcessRunner>> runners;
  for (int h = 1; h <= hosts; ++h) {
    launcher::SshProcessRunnerOptions options;
    options.ssh.host = "node" + std::to_string(h);
    runners.push_back(std::make_unique<launcher::SshProcessRunner>(options, &fs));
  }
  ::usleep(200 * 1000);  // every I/O thread has started and polled once
  rlimit stack{}, files{};
  ::getrlimit(RLIMIT_STACK, &stack);
  ::getrlimit(RLIMIT_NOFILE, &files);
  JsonObject line;
  line.SetString("bench", "manager_scale")
      .SetString("what", "ssh_runners")
      .SetInt("hosts", hosts)
      .SetInt("threads", ProcStatus("Threads") - threads)
      .SetInt("rss_kib", ProcStatus("VmRSS") - rss)
      .SetInt("virtual_mib", (ProcStatus("VmSize") - virt) / 1024)
      .SetInt("descriptors", OpenFiles() - fds)
      .SetInt("stack_limit_kib", static_cast<int64_t>(stack.rlim_cur / 1024))
      .SetInt("open_files_soft_limit", static_cast<int64_t>(files.rlim_cur));
  return line;
}

// Runs `measure` in a child process (its own peak RSS and threads) and returns its line.
JsonObject InChild(const std::function<JsonObject()>& measure) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  std::cout.flush();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const std::string text = measure().ToJson() + "\n";
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fds[1], text.data() + done, text.size() - done);
      if (n <= 0) ::_exit(1);
      done += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buffer, sizeof(buffer))) > 0) text.append(buffer, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  Result<JsonObject> line = JsonObject::Parse(text);
  if (!line.ok()) {
    std::cerr << "manager_scale: a measurement failed: " << text << "\n";
    std::exit(1);
  }
  std::cout << text << std::flush;
  return *line;
}

double Field(const JsonObject& line, const std::string& outer, const std::string& key) {
  const JsonValue* value = line.Find(outer);
  if (value == nullptr) return 0;
  Result<JsonObject> inner = JsonObject::Parse(value->string_value());
  return inner.ok() ? inner->GetNumber(key).value_or(0) : 0;
}

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"manager_scale: the manager's loop and controller at scale, by simulation",
               "manager_scale"};
  const CLI::Validator whole(
      [](std::string& value) -> std::string {
        const std::optional<int64_t> n = ParseInt64(value);
        return n && *n >= 1 && *n <= 1000000 ? "" : "'" + value + "' is not a whole number >= 1";
      },
      "");
  const CLI::Validator seconds(
      [](std::string& value) -> std::string {
        const std::optional<double> s = ParseDouble(value);
        return s && *s > 0 ? "" : "'" + value + "' is not a positive number of seconds";
      },
      "");
  app.add_option("--machines", flags.machines, "machines of the large job")
      ->check(whole)
      ->capture_default_str();
  app.add_option("--slots", flags.slots, "slots per machine")->check(whole)->capture_default_str();
  app.add_option("--baseline-machines", flags.baseline_machines, "machines of the small job")
      ->check(whole)
      ->capture_default_str();
  app.add_option("--seconds", flags.seconds, "seconds of training per phase")
      ->check(seconds)
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "manager_scale: " << e.what() << "; see `manager_scale --help`\n";
    return 2;
  }
  const JsonObject small = InChild([&] { return RunJob(flags, flags.baseline_machines); });
  const JsonObject large = InChild([&] { return RunJob(flags, flags.machines); });
  const JsonObject ssh = InChild([&] { return SshRunners(flags.machines); });
  (void)ssh;

  auto number = [](const JsonObject& line, const char* key) {
    return line.GetNumber(key).value_or(0);
  };
  JsonObject summary;
  summary.SetString("bench", "manager_scale")
      .SetString("what", "summary")
      .SetInt("baseline_ranks", static_cast<int64_t>(number(small, "ranks")))
      .SetInt("ranks", static_cast<int64_t>(number(large, "ranks")))
      .SetNumber("heartbeat_us_ratio", Field(large, "us_per_event", "heartbeat") /
                                           Field(small, "us_per_event", "heartbeat"))
      .SetNumber("events_per_cpu_s_ratio",
                 number(large, "events_per_cpu_s") / number(small, "events_per_cpu_s"))
      .SetNumber("core_share", number(large, "core_share"))
      .SetNumber("edit_to_last_signal_ms", Field(large, "edit_to_signals", "last_ms"))
      .SetNumber("failure_to_last_signal_ms", Field(large, "failure_to_signals", "last_ms"))
      .SetBool("reaction_under_100_ms",
               Field(large, "edit_to_signals", "last_ms") < 100 &&
                   Field(large, "failure_to_signals", "last_ms") < 100);
  std::cout << summary.ToJson() << std::endl;
  return 0;
}

}  // namespace
}  // namespace mitra::run

int main(int argc, char** argv) { return mitra::run::Main(argc, argv); }
