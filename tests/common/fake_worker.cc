// fake_worker: a stand-in for a mitra training program, without LibTorch, for the manager's
// integration tests. It follows docs/worker-contract.md: MITRA_DESCRIBE=1 prints the describe
// record; otherwise it reads its place from MITRA_* variables, prints `ready`, one `step`
// record per step on rank 0 and `stopped` at the end, and stops after the current step on
// SIGUSR1. Flags make it misbehave on purpose:
//
//   --segments N            describe: N segments (default 4)
//   --describe-exit CODE    describe: print a complaint and exit CODE
//   --describe-silent       describe: print nothing, exit 0
//   --steps N               steps when MITRA_MAX_STEPS is 0 (default 5)
//   --step-ms MS            time per step (default 20)
//   --crash-rank R --crash-at-step K [--exit-code C | --crash-signal S]
//                           rank R dies after step K (exit code C, default 3, or signal S)
//   --hang-rank R --hang-at-step K
//                           rank R stops making progress after step K, ignoring SIGUSR1
//   --silent-rank R         rank R hangs before its first record (as when a program stops
//                           before it reaches mitra), ignoring SIGUSR1
//   --slow-start-ms MS      every rank prints `starting`, then sleeps MS before its first
//                           heartbeat (as a program importing torch on a busy machine)
//   --config-error-rank R   rank R refuses its configuration before its first step: prints an
//                           error naming it and exits 2 (as a program given a bad flag does)
//   --fail-generation G     crash and hang only in generation G (default: every generation)
//   --vary-crash            the crash's message changes from one generation to the next (a
//                           failure that is not the same twice in a row)
//   --ignore-sigterm        ignore SIGTERM (so only SIGKILL ends it)
//   --marker-dir DIR        create DIR/started-rank-R when training starts
//
// Every rank also logs its MITRA_* variables, so tests can check what the manager passed, and
// prints a `heartbeat` record when it starts and after every step (none while it hangs).
// Started by `mitra profile` (MITRA_PROFILE=1) it reports a made-up profile and exits: every
// segment costs 1 ms + 1 ms per sample forward and twice that backward, any number of busy
// processes runs at full speed, messages are free and an all-reduce costs 1 ms.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_stop_requested = 0;

extern "C" void OnUsr1(int) { g_stop_requested = 1; }

struct Flags {
  int segments = 4;
  int describe_exit = -1;
  bool describe_silent = false;
  long steps = 5;
  long step_ms = 20;
  int crash_rank = -1;
  long crash_at_step = -1;
  int exit_code = 3;
  int crash_signal = 0;
  bool vary_crash = false;
  int hang_rank = -1;
  int silent_rank = -1;
  long slow_start_ms = 0;
  int config_error_rank = -1;
  long hang_at_step = -1;
  bool ignore_sigterm = false;
  long fail_generation = -1;
  std::string marker_dir;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fake_worker: %s needs a value\n", arg.c_str());
        std::exit(64);
      }
      return argv[++i];
    };
    if (arg == "--segments")
      f.segments = std::atoi(next());
    else if (arg == "--describe-exit")
      f.describe_exit = std::atoi(next());
    else if (arg == "--describe-silent")
      f.describe_silent = true;
    else if (arg == "--steps")
      f.steps = std::atol(next());
    else if (arg == "--step-ms")
      f.step_ms = std::atol(next());
    else if (arg == "--crash-rank")
      f.crash_rank = std::atoi(next());
    else if (arg == "--crash-at-step")
      f.crash_at_step = std::atol(next());
    else if (arg == "--exit-code")
      f.exit_code = std::atoi(next());
    else if (arg == "--crash-signal")
      f.crash_signal = std::atoi(next());
    else if (arg == "--vary-crash")
      f.vary_crash = true;
    else if (arg == "--hang-rank")
      f.hang_rank = std::atoi(next());
    else if (arg == "--hang-at-step")
      f.hang_at_step = std::atol(next());
    else if (arg == "--silent-rank")
      f.silent_rank = std::atoi(next());
    else if (arg == "--slow-start-ms")
      f.slow_start_ms = std::atol(next());
    else if (arg == "--config-error-rank")
      f.config_error_rank = std::atoi(next());
    else if (arg == "--fail-generation")
      f.fail_generation = std::atol(next());
    else if (arg == "--ignore-sigterm")
      f.ignore_sigterm = true;
    else if (arg == "--marker-dir")
      f.marker_dir = next();
    else {
      std::fprintf(stderr, "fake_worker: unknown flag %s\n", arg.c_str());
      std::exit(64);
    }
  }
  return f;
}

long EnvLong(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atol(v) : fallback;
}

void SleepMs(long ms) {
  if (ms > 0) ::usleep(static_cast<useconds_t>(ms) * 1000);
}

// The profile records of docs/planner.md, made up (see the top of the file).
int Profile(const Flags& f, int rank) {
  const char* machines = std::getenv("MITRA_PROFILE_MACHINES");
  const char* slots = std::getenv("MITRA_PROFILE_SLOTS");
  const char* sizes = std::getenv("MITRA_PROFILE_MICRO_BATCHES");
  if (!machines || !slots || !sizes) return 66;
  std::vector<std::string> names;
  std::string machine_text = machines;
  for (char* name = std::strtok(machine_text.data(), " "); name; name = std::strtok(nullptr, " ")) {
    names.push_back(name);
  }
  std::vector<long> counts;
  std::string slot_text = slots;
  for (char* n = std::strtok(slot_text.data(), " "); n; n = std::strtok(nullptr, " ")) counts.push_back(std::atol(n));
  long first = 0;
  for (size_t m = 0; m < counts.size() && m < names.size(); ++m) {
    if (rank == first) {
      std::string costs;
      std::string size_text = sizes;
      for (char* n = std::strtok(size_text.data(), ","); n; n = std::strtok(nullptr, ",")) {
        const long mb = std::atol(n);
        char cost[256];
        std::snprintf(cost, sizeof(cost),
                      "%s{\"micro_batch\":%ld,\"forward_s\":%g,\"forward_nograd_s\":%g,"
                      "\"backward_s\":%g,\"output_bytes\":%ld,\"graph_bytes\":%ld}",
                      costs.empty() ? "" : ",", mb, 0.001 + 0.001 * mb, 0.001 + 0.001 * mb,
                      0.002 + 0.002 * mb, 1024 * mb, 4096 * mb);
        costs += cost;
      }
      std::string segments;
      for (int s = 0; s < f.segments; ++s) {
        segments += (s ? "," : "") + std::string("{\"name\":\"s") + std::to_string(s) +
                    "\",\"parameters\":1000,\"parameter_bytes\":4000,\"buffer_bytes\":0,"
                    "\"optimizer_bytes\":8000,\"update_s\":0.0001,\"costs\":[" + costs + "]}";
      }
      std::printf("@mitra {\"event\":\"profile_machine\",\"machine\":%zu,\"profile\":{"
                  "\"address\":\"%s\",\"slots\":%ld,\"memory_bytes\":0,\"sample_s\":0,"
                  "\"speed\":[1,1,1,1,1,1,1,1],\"segments\":[%s]}}\n",
                  m, names[m].c_str(), counts[m], segments.c_str());
    }
    first += counts[m];
  }
  if (rank == 0) {
    std::printf("@mitra {\"event\":\"profile_comm\",\"profile\":{\"step_sync_s\":0.0001,"
                "\"links\":[],\"allreduce\":[{\"group\":2,\"latency_s\":0.001,"
                "\"bytes_per_s\":1e12,\"samples\":[]}]}}\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // stdout is a pipe: flush every line
  const Flags f = ParseFlags(argc, argv);

  const char* describe = std::getenv("MITRA_DESCRIBE");
  if (describe && std::strcmp(describe, "0") != 0) {
    if (f.describe_silent) return 0;
    if (f.describe_exit >= 0) {
      std::fprintf(stderr, "fake_worker: cannot build the model (on purpose)\n");
      return f.describe_exit;
    }
    std::printf("fake_worker: describing myself\n");
    std::printf("@mitra {\"event\":\"describe\",\"segments\":%d,\"tokens_per_sample\":128}\n",
                f.segments);
    return 0;
  }

  struct sigaction usr1 {};
  usr1.sa_handler = OnUsr1;
  sigemptyset(&usr1.sa_mask);
  ::sigaction(SIGUSR1, &usr1, nullptr);
  if (f.ignore_sigterm) ::signal(SIGTERM, SIG_IGN);

  const char* rank_text = std::getenv("MITRA_RANK");
  const char* map = std::getenv("MITRA_STAGE_TO_RANK_MAP");
  if (!rank_text || !map) {
    std::fprintf(stderr, "fake_worker: MITRA_RANK or MITRA_STAGE_TO_RANK_MAP missing\n");
    return 65;
  }
  const int rank = std::atoi(rank_text);
  if (const char* profile = std::getenv("MITRA_PROFILE"); profile && std::strcmp(profile, "1") == 0) {
    return Profile(f, rank);
  }
  const long world = EnvLong("MITRA_WORLD_SIZE", 0);
  const long generation = EnvLong("MITRA_GENERATION", 0);
  long stages = 0;  // one ';' after every stage
  long commas = 0;  // one ',' between two ranks of a stage
  for (const char* p = map; *p; ++p) {
    if (*p == ';') ++stages;
    if (*p == ',') ++commas;
  }
  const long ranks_in_map = stages + commas;
  if (stages == 0 || ranks_in_map != world || world % stages != 0) {
    std::fprintf(stderr, "fake_worker: stage map '%s' does not fit world size %ld\n", map, world);
    return 66;
  }
  const long replicas = world / stages;

  for (const char* name :
       {"MITRA_RANK", "MITRA_LOCAL_RANK", "MITRA_WORLD_SIZE", "MITRA_STAGE_TO_RANK_MAP",
        "MITRA_CHUNK_SIZE", "MITRA_GLOBAL_BATCH", "MITRA_MAX_STEPS",
        "MITRA_RESUME_STEP", "MITRA_RDZV_HOST", "MITRA_RDZV_PORT", "MITRA_GENERATION", "MITRA_HOST",
        "MITRA_THREADS", "MITRA_TIMEOUT_S", "MITRA_RUN_DIR", "MITRA_DESCRIBE", "MITRA_SCHEDULE",
        "MITRA_PARTITION", "MITRA_RECOMPUTE"}) {
    const char* value = std::getenv(name);
    std::printf("fake_worker: %s=%s\n", name, value ? value : "<unset>");
  }
  std::fprintf(stderr, "fake_worker: rank %d (pid %d) starting\n", rank,
               static_cast<int>(::getpid()));
  if (!f.marker_dir.empty()) {
    const std::string path = f.marker_dir + "/started-rank-" + std::to_string(rank);
    if (FILE* marker = std::fopen(path.c_str(), "w")) std::fclose(marker);
  }
  if (f.slow_start_ms > 0) {
    std::printf("@mitra {\"event\":\"starting\",\"rank\":%d}\n", rank);
    std::fflush(stdout);
    SleepMs(f.slow_start_ms);
  }
  if (rank == f.silent_rank && (f.fail_generation < 0 || f.fail_generation == generation)) {
    std::fprintf(stderr, "fake_worker: rank %d silent from the start\n", rank);
    for (;;) SleepMs(1000);
  }
  std::printf("@mitra {\"event\":\"heartbeat\",\"rank\":%d}\n", rank);
  if (rank == f.config_error_rank) {
    std::fprintf(stderr,
                 "fake_worker: error: rank %d: unknown schedule 'zb-x' (expected gpipe, 1f1b, "
                 "varuna, zb-h1, interleaved or zb-v)\n",
                 rank);
    return 2;
  }
  std::printf(
      "@mitra {\"event\":\"ready\",\"rank\":%d,\"stages\":%ld,\"replicas\":%ld,"
      "\"generation\":%ld}\n",
      rank, stages, replicas, generation);

  const long max_steps =
      EnvLong("MITRA_MAX_STEPS", 0) > 0 ? EnvLong("MITRA_MAX_STEPS", 0) : f.steps;
  const long batch = EnvLong("MITRA_GLOBAL_BATCH", 1);
  long step = EnvLong("MITRA_RESUME_STEP", 0);
  const char* reason = "max_steps";
  while (step < max_steps) {
    SleepMs(f.step_ms);
    ++step;
    if (rank == 0) {
      const double step_time = f.step_ms / 1000.0;
      const double tokens = batch * 128.0;
      std::printf(
          "@mitra {\"event\":\"step\",\"step\":%ld,\"loss\":%.4f,\"samples\":%ld,"
          "\"tokens\":%.0f,\"tokens_per_s\":%.1f,\"step_time_s\":%.3f,\"stages\":%ld,"
          "\"replicas\":%ld,\"generation\":%ld,\"lr\":0.001,\"grad_norm\":1.5}\n",
          step, 10.0 / static_cast<double>(step), batch, tokens,
          step_time > 0 ? tokens / step_time : 0.0, step_time, stages, replicas, generation);
    }
    std::printf("fake_worker: rank %d finished step %ld\n", rank, step);
    std::printf("@mitra {\"event\":\"heartbeat\",\"rank\":%d}\n", rank);
    const bool may_fail = f.fail_generation < 0 || f.fail_generation == generation;
    if (may_fail && rank == f.crash_rank && step == f.crash_at_step) {
      std::printf("fake_worker: rank %d simulating a crash after step %ld\n", rank, step);
      static const char* const kWords[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"};
      std::fprintf(stderr, "fake_worker: fatal: simulated failure on rank %d%s%s\n", rank,
                   f.vary_crash ? ", " : "", f.vary_crash ? kWords[generation % 6] : "");
      if (f.crash_signal != 0) ::kill(::getpid(), f.crash_signal);
      return f.exit_code;
    }
    if (may_fail && rank == f.hang_rank && step == f.hang_at_step) {
      std::printf("fake_worker: rank %d hanging after step %ld\n", rank, step);
      while (true) ::pause();  // SIGUSR1 only sets the flag; nothing reads it any more
    }
    if (g_stop_requested) {
      std::printf("fake_worker: rank %d got SIGUSR1, stopping after step %ld\n", rank, step);
      reason = "signal";
      break;
    }
  }
  std::printf("@mitra {\"event\":\"stopped\",\"step\":%ld,\"reason\":\"%s\"}\n", step, reason);
  return 0;
}
