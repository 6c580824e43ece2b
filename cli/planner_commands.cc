#include "cli/planner_commands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cctype>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/flags.h"
#include "cli/run_command.h"
#include "common/file_system.h"
#include "common/strings.h"
#include "manager/machine_list.h"
#include "planner/planner.h"
#include "records/reader.h"
#include "run/profile_job.h"

namespace mitra::cli {
namespace {

namespace fs = std::filesystem;

int BadInput(CommandContext& c, const std::string& command, const std::string& message) {
  for (const std::string_view line : SplitLines(message)) {
    *c.err << (StartsWith(std::string(line), "mitra ") ? "" : "mitra " + command + ": ") << line
           << "\n";
  }
  c.err->flush();
  return kExitBadInput;
}

std::string Fixed(double v, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, v);
  return buffer;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Status::IoError("cannot write " + path);
  return Status::Ok();
}

std::string Quote(const std::string& s) { return JsonQuote(s); }

std::string CandidateJson(const planner::PlannedShape& s) {
  const planner::Candidate& c = s.candidate;
  std::ostringstream out;
  out << "{\"stages\":" << c.stages << ",\"replicas\":" << c.replicas
      << ",\"chunk_size\":" << c.chunk_size
      << ",\"schedule\":" << Quote(planner::ScheduleName(c.schedule))
      << ",\"recompute\":" << (c.recompute ? "true" : "false")
      << ",\"zero\":" << (c.zero && c.replicas > 1 ? 1 : 0)
      << ",\"partition\":" << Quote(c.PartitionText())
      << ",\"shares\":" << Quote(planner::Uneven(c.shares) ? planner::SharesText(c.shares) : "")
      << ",\"idle_slots\":" << s.idle_slots
      << ",\"predicted_step_s\":" << s.prediction.step_s
      << ",\"predicted_memory_bytes\":" << s.prediction.max_memory_bytes
      << ",\"bubble_fraction\":" << s.prediction.bubble_fraction << "}";
  return out.str();
}

// Each listed machine's speed as the profile has it: the fastest one's forward and backward of
// every segment at the largest profiled micro-batch over its own, in list order.
std::vector<std::pair<std::string, double>> MachineSpeeds(
    const planner::Profile& profile, const std::vector<planner::MachineSlots>& machines) {
  const int64_t size = profile.micro_batches.back();
  std::vector<std::pair<std::string, double>> out;
  double fastest = 0;
  for (const planner::MachineSlots& m : machines) {
    double seconds = 0;
    for (int s = 0; s < profile.num_segments(); ++s) {
      const planner::SegmentCost cost = profile.CostAt(profile.Machine(m.address), s, size);
      seconds += cost.forward_s + cost.backward_s;
    }
    out.emplace_back(m.address, seconds);
    if (seconds > 0 && (fastest == 0 || seconds < fastest)) fastest = seconds;
  }
  for (auto& [address, speed] : out) speed = speed > 0 ? fastest / speed : 0;
  return out;
}

}  // namespace

std::string ProfileUsage() {
  return "usage: mitra profile --machines FILE --batch-size B --out DIR [flags] -- PROGRAM [ARGS...]\n"
         "\n"
         "Runs PROGRAM once per slot of the machines in FILE in profiling mode and writes what\n"
         "it costs to DIR/profile.json (and DIR/segments.csv), for `mitra plan` and `mitra run`.\n"
         "\n"
         "  --machines FILE        machine list, as for `mitra run`\n"
         "  --batch-size B         the job's global batch (micro-batches above it are left out)\n"
         "  --out DIR              where the profile goes (created)\n"
         "  --micro-batches LIST   sizes to measure (default 1,2,4,8,16)\n"
         "  --repeats N            measurements per figure; the median is kept (default 5)\n"
         "  --gpus-per-node N      slots of a machine line without slots= (default 1)\n"
         "  --threads N            MITRA_THREADS for the processes (default 1)\n"
         "  --timeout S            each wait of the processes (default 600)\n"
         "  --code-dir DIR, --env KEY=VALUE, --known-hosts FILE, --identity FILE: as for run\n";
}

std::string PlanUsage() {
  return "usage: mitra plan --profile DIR --batch-size B (--slots N | --machines FILE) [flags]\n"
         "\n"
         "Ranks the shapes (stages x replicas, micro-batch, schedule, partition) the profiled\n"
         "program could train in on N slots or the machines of FILE, by predicted step time.\n"
         "\n"
         "  --profile DIR          a profile written by `mitra profile` (or its profile.json)\n"
         "  --batch-size B         the global batch\n"
         "  --slots N              N slots on machines like the profiled one, or\n"
         "  --machines FILE        the machines of a list (named as when profiled)\n"
         "  --top K                shapes to show (default 10)\n"
         "  --json                 print {\"planning_s\", \"best\", \"candidates\"} instead\n"
         "  --nstages P            only shapes of P stages\n"
         "  --chunk-size M         only micro-batches of M samples\n"
         "  --trace FILE           the best shape's predicted step as a chrome trace (Perfetto)\n"
         "  --gpus-per-node N      slots of a machine line without slots= (default 1)\n"
         "\n"
         "       mitra plan --validate RUN_DIR [--generation G] [--profile DIR]\n"
         "\n"
         "Simulates the shape a run trained in (its newest generation, or G) with the profile\n"
         "(--profile, else RUN_DIR/profile) and prints predicted against measured: the step\n"
         "time (metrics.jsonl), and per stage and per instruction the times of the step each\n"
         "worker traced (logs/gen-G/rank-R.trace.json).\n";
}

Result<ProfileCommandOptions> ParseProfileCommand(const std::vector<std::string>& args) {
  ProfileCommandOptions o;
  Flags flags("profile");
  flags.Text("--machines", &o.machines_path, "a file name", "machines.txt");
  flags.Whole("--batch-size", 1, &o.batch_size, "32");
  flags.Text("--out", &o.out_dir, "a directory name", "profile");
  flags.Wholes("--micro-batches", &o.micro_batches, "1,2,4,8,16");
  flags.Whole("--repeats", 1, &o.repeats, "5");
  flags.Whole("--gpus-per-node", 1, &o.gpus_per_node, "4");
  flags.Whole("--threads", 1, &o.threads, "4");
  flags.Seconds("--timeout", &o.timeout_s, "600");
  flags.Text("--code-dir", &o.code_dir, "a path", "/srv/train");
  flags.Text("--known-hosts", &o.known_hosts, "a path", "~/.ssh/known_hosts");
  flags.Text("--identity", &o.identity, "a path", "~/.ssh/id_ed25519");
  flags.Environment("--env", &o.env);
  flags.Program(&o.program, &o.program_args,
                "mitra profile --machines machines.txt --batch-size 32 --out profile -- ./train");
  if (Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help()) {
    o.help_text = ProfileUsage();
    return o;
  }
  if (o.machines_path.empty() || o.batch_size == 0 || o.out_dir.empty()) {
    return Status::InvalidArgument("mitra profile: --machines, --batch-size and --out are "
                                   "required, e.g. mitra profile --machines machines.txt "
                                   "--batch-size 32 --out profile -- ./train");
  }
  if (Status s = flags.CheckProgram(); !s.ok()) return s;
  return o;
}

Result<PlanCommandOptions> ParsePlanCommand(const std::vector<std::string>& args) {
  PlanCommandOptions o;
  Flags flags("plan");
  flags.Text("--profile", &o.profile_dir, "a directory name", "profile");
  flags.Whole("--batch-size", 1, &o.batch_size, "32");
  flags.Whole("--slots", 1, &o.slots, "8");
  flags.Text("--machines", &o.machines_path, "a file name", "machines.txt");
  flags.Whole("--gpus-per-node", 1, &o.gpus_per_node, "4");
  flags.Whole("--top", 1, &o.top, "5");
  flags.Whole("--nstages", 1, &o.stages, "2");
  flags.Whole("--chunk-size", 1, &o.chunk_size, "4");
  flags.Text("--trace", &o.trace_path, "a file name", "step.trace.json");
  flags.Text("--validate", &o.validate_dir, "a directory name", "mitra-run");
  flags.Whole("--generation", 0, &o.generation, "1");
  flags.Switch("--json", &o.json);
  if (Status s = flags.Parse(args); !s.ok()) return s;
  if (flags.help()) {
    o.help_text = PlanUsage();
    return o;
  }
  if (!o.validate_dir.empty()) return o;
  if (o.profile_dir.empty() || o.batch_size == 0) {
    return Status::InvalidArgument("mitra plan: --profile and --batch-size are required, e.g. "
                                   "mitra plan --profile profile --batch-size 32 --slots 8");
  }
  if ((o.slots > 0) == !o.machines_path.empty()) {
    return Status::InvalidArgument("mitra plan: give either --slots N or --machines FILE");
  }
  return o;
}

Result<planner::Profile> LoadProfile(const std::string& path) {
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? (fs::path(path) / "profile.json").string() : path;
  std::ifstream in(file);
  if (!in) {
    return Status::InvalidArgument("no profile at " + file +
                                   ": write one with `mitra profile --out " + path + " ...`");
  }
  std::stringstream text;
  text << in.rdbuf();
  return planner::Profile::FromJson(text.str(), file);
}

int ProfileCommand(const ProfileCommandOptions& o, CommandContext& c) {
  Result<manager::MachineList> machines = manager::LoadMachineList(*c.fs, o.machines_path, o.gpus_per_node);
  if (!machines.ok()) return BadInput(c, "profile", machines.status().message());
  const std::string* path = nullptr;
  if (auto it = c.environment.find("PATH"); it != c.environment.end()) path = &it->second;
  Result<std::string> program = c.runner->ResolveProgram(o.program, path ? *path : "");
  if (!program.ok()) return BadInput(c, "profile", program.status().message());
  std::error_code ec;
  fs::create_directories(fs::path(o.out_dir) / "logs", ec);
  if (ec) return BadInput(c, "profile", "cannot create " + o.out_dir + ": " + ec.message());
  const std::string out_dir = fs::absolute(o.out_dir).string();

  run::ProfileJobOptions job;
  job.worker = run::WorkerProgram::Make(*program, o.program_args, c.environment, o.env,
                                   c.working_directory, o.code_dir);
  job.global_batch = o.batch_size;
  job.micro_batches = o.micro_batches;
  job.repeats = o.repeats;
  job.threads = o.threads;
  job.timeout_s = o.timeout_s;
  job.log_dir = out_dir + "/logs";
  std::vector<std::string> names;
  for (const manager::Machine& m : machines->machines) {
    names.push_back(m.Address() + " (" + std::to_string(m.slots) + (m.slots == 1 ? " slot)" : " slots)"));
  }
  *c.out << "mitra: profiling '" << *program << "' on " << Join(names, ", ") << std::endl;
  const double start = c.clock->MonotonicSeconds();
  Result<planner::Profile> profile = run::ProfileProgram(*c.transports, *machines, job, *c.clock);
  if (!profile.ok()) {
    *c.err << "mitra profile: " << profile.status().message() << "\n";
    return profile.status().code() == Status::Code::kInvalidArgument ? kExitBadInput : kExitFailed;
  }
  const std::string json = out_dir + "/profile.json";
  for (const auto& [file, text] :
       {std::make_pair(json, profile->ToJson()),
        std::make_pair(out_dir + "/segments.csv", profile->SegmentsCsv())}) {
    if (Status s = WriteFile(file, text); !s.ok()) {
      *c.err << "mitra profile: " << s.message() << "\n";
      return kExitFailed;
    }
  }
  *c.out << "mitra: profile written to " << json << " (and segments.csv) in "
         << Fixed(c.clock->MonotonicSeconds() - start, 1) << " s" << std::endl;
  const int64_t size = profile->micro_batches.back();
  for (const planner::MachineProfile& m : profile->machines) {
    double step = 0;
    for (int s = 0; s < profile->num_segments(); ++s) {
      const planner::SegmentCost cost = profile->CostAt(m, s, size);
      step += cost.forward_s + cost.backward_s;
    }
    std::string speeds;
    for (size_t k = 1; k < m.speed.size(); ++k) {
      speeds += (speeds.empty() ? "" : ", ") + std::to_string(k + 1) + " busy " + Fixed(m.speed[k], 2);
    }
    *c.out << "  " << m.address << ": " << profile->num_segments() << " segments, forward + "
           << "backward of a micro-batch of " << size << ": " << Fixed(step * 1e3, 1) << " ms"
           << (speeds.empty() ? "" : "; speed per process with " + speeds) << "\n";
  }
  for (const planner::LinkProfile& l : profile->links) {
    *c.out << "  link " << l.from << " - " << l.to << ": " << Fixed(l.latency_s * 1e6, 0)
           << " us + " << Fixed(l.bytes_per_s / 1e9, 2) << " GB/s";
    if (l.send_bytes_per_s > 0) {
      *c.out << "; a send while computing takes its caller " << Fixed(l.send_latency_s * 1e6, 0)
             << " us + " << Fixed(l.send_bytes_per_s / 1e9, 2) << " GB/s";
    }
    *c.out << "\n";
  }
  for (const planner::AllreduceProfile& a : profile->allreduce) {
    *c.out << "  all-reduce over " << a.group << ": " << Fixed(a.latency_s * 1e6, 0) << " us + "
           << Fixed(a.bytes_per_s / 1e9, 2) << " GB/s\n";
  }
  c.out->flush();
  return kExitOk;
}

int PlanCommand(const PlanCommandOptions& o, CommandContext& c) {
  if (!o.validate_dir.empty()) return ValidateCommand(o, c);
  Result<planner::Profile> profile = LoadProfile(o.profile_dir);
  if (!profile.ok()) return BadInput(c, "plan", profile.status().message());
  planner::PlanRequest request;
  request.profile = &*profile;
  request.global_batch = o.batch_size;
  request.stages = o.stages;
  request.chunk_size = o.chunk_size;
  request.keep = o.top;
  if (!o.machines_path.empty()) {
    Result<manager::MachineList> machines = manager::LoadMachineList(*c.fs, o.machines_path, o.gpus_per_node);
    if (!machines.ok()) return BadInput(c, "plan", machines.status().message());
    for (const manager::Machine& m : machines->machines) request.machines.push_back({m.Address(), m.slots});
  } else {
    // Machines like the profiled one, with as many slots as it had.
    const planner::MachineProfile& typical = profile->machines.front();
    const int per = std::max(1, typical.slots);
    for (int left = o.slots, i = 0; left > 0; left -= per, ++i) {
      request.machines.push_back(
          {i == 0 ? typical.address : typical.address + "#" + std::to_string(i + 1), std::min(per, left)});
    }
  }
  const auto start = std::chrono::steady_clock::now();
  Result<planner::PlanResult> plan = planner::PlanShapes(request);
  const double planning_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!plan.ok()) return BadInput(c, "plan", plan.status().message());
  int slots = 0;
  for (const planner::MachineSlots& m : request.machines) slots += m.slots;

  if (!o.trace_path.empty()) {
    planner::SimulationInput in;
    in.profile = &*profile;
    in.candidate = plan->candidates.front().candidate;
    in.global_batch = o.batch_size;
    in.rank_machines = planner::PlaceRanks(request.machines, in.candidate.stages * in.candidate.replicas);
    in.trace = true;
    Result<planner::Prediction> traced = planner::Simulate(in);
    if (traced.ok()) {
      if (Status s = WriteFile(o.trace_path, traced->trace); !s.ok()) {
        return BadInput(c, "plan", s.message());
      }
    }
  }
  const size_t shown = std::min<size_t>(plan->candidates.size(), static_cast<size_t>(o.top));
  const std::vector<std::pair<std::string, double>> speeds =
      MachineSpeeds(*profile, request.machines);
  if (o.json) {
    std::ostringstream out;
    out << "{\"planning_s\":" << planning_s << ",\"slots\":" << slots
        << ",\"global_batch\":" << o.batch_size << ",\"considered\":" << plan->considered
        << ",\"simulated\":" << plan->simulated
        << ",\"too_big\":" << plan->too_big << ",\"machine_speeds\":{";
    for (size_t i = 0; i < speeds.size(); ++i) {
      out << (i ? "," : "") << Quote(speeds[i].first) << ":" << Fixed(speeds[i].second, 3);
    }
    out << "},\"best\":" << CandidateJson(plan->candidates[0]) << ",\"candidates\":[";
    for (size_t i = 0; i < shown; ++i) out << (i ? "," : "") << CandidateJson(plan->candidates[i]);
    out << "]}";
    *c.out << out.str() << std::endl;
    return kExitOk;
  }
  *c.out << "mitra plan: " << slots << (slots == 1 ? " slot" : " slots") << ", batch "
         << o.batch_size << ": " << plan->considered << " shapes considered, "
         << plan->simulated << " simulated in " << Fixed(planning_s, 3) << " s ("
         << plan->too_big << " too big for memory)\n";
  // Machines that differ: their speeds, which uneven shares follow.
  if (std::any_of(speeds.begin(), speeds.end(), [](const auto& s) { return s.second < 0.95; })) {
    *c.out << "  machine speeds (the fastest's forward and backward over each one's):";
    for (const auto& [address, speed] : speeds) *c.out << " " << address << " " << Fixed(speed, 2);
    *c.out << "\n";
  }
  *c.out << "  #  shape      micro-batch  schedule          partition             idle  step s    "
            "samples/s  memory MB  bubble  shares\n";
  for (size_t i = 0; i < shown; ++i) {
    const planner::PlannedShape& s = plan->candidates[i];
    const planner::Candidate& k = s.candidate;
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%3zu  %-9s  %-11lld  %-16s  %-20s  %4d  %-8s  %-9s  %-9s  %.2f    ",
                  i + 1, (std::to_string(k.stages) + " x " + std::to_string(k.replicas)).c_str(),
                  static_cast<long long>(k.chunk_size),
                  k.ScheduleText().c_str(),
                  k.PartitionText().c_str(), s.idle_slots, Fixed(s.prediction.step_s, 4).c_str(),
                  Fixed(static_cast<double>(o.batch_size) / s.prediction.step_s, 1).c_str(),
                  Fixed(static_cast<double>(s.prediction.max_memory_bytes) / 1e6, 1).c_str(),
                  s.prediction.bubble_fraction);
    *c.out << line << (planner::Uneven(k.shares) ? planner::SharesText(k.shares) : "even") << "\n";
  }
  c.out->flush();
  return kExitOk;
}

}  // namespace mitra::cli

namespace mitra::cli {
namespace {

// What a run directory recorded of the generation `plan --validate` checks.
struct RecordedRun {
  records::Launch launch;
  records::Settings settings;      // its workers' settings: schedule, partition
  std::vector<double> step_times;  // of its steps, in order
};

// The generation `generation` (-1: the newest) of the run in `run_dir`; InvalidArgument naming
// what is missing.
Result<RecordedRun> ReadRecordedRun(FileSystem& fs, const std::string& run_dir,
                                    int64_t generation) {
  const records::RunDirReader reader(&fs, run_dir);
  std::optional<records::Launch> launch;
  const std::vector<records::EventRecord> events = reader.Events();
  for (const records::EventRecord& e : events) {
    if (!e.Is<records::Launch>()) continue;
    records::Launch l = e.As<records::Launch>();
    if (generation >= 0 && l.shape.generation != generation) continue;
    launch = std::move(l);
  }
  if (!launch) {
    return Status::InvalidArgument(
        JoinPath(run_dir, records::kEventsFile) + " records no launch" +
        (generation >= 0 ? " of generation " + std::to_string(generation) : "") +
        ": give the run directory of a job that ran");
  }
  std::optional<records::Settings> settings;
  for (const records::EventRecord& e : events) {
    if (!e.Is<records::Settings>()) continue;
    records::Settings s = e.As<records::Settings>();
    if (s.generation <= launch->shape.generation) settings = std::move(s);
  }
  if (!settings || !settings->partition) {
    return Status::InvalidArgument(run_dir + " records no settings of its workers (schedule, "
                                             "partition): run it with this mitra");
  }
  RecordedRun run{std::move(*launch), std::move(*settings), {}};
  for (const JsonObject& m : reader.Metrics().records) {
    if (!records::StepMetrics::IsStep(m)) continue;
    const auto step = records::FromJson<records::StepMetrics>(m);
    if (step.generation == run.launch.shape.generation) run.step_times.push_back(step.step_time_s);
  }
  return run;
}

// "F12" -> "F", "Bi3.1" (a second chunk's) -> "Bi", "reduce" -> "reduce".
std::string Kind(const std::string& name) {
  size_t end = name.size();
  while (end > 0 && (std::isdigit(static_cast<unsigned char>(name[end - 1])) || name[end - 1] == '.')) {
    --end;
  }
  return name.substr(0, end);
}

struct Spent {
  double total = 0;
  int count = 0;
};

// The shape a recorded run trained in, as the simulator's input.
Result<planner::SimulationInput> SimulationOf(const RecordedRun& run,
                                              const planner::Profile& profile) {
  const records::Launch& launch = run.launch;
  planner::SimulationInput in;
  in.profile = &profile;
  in.trace = true;
  in.global_batch = launch.shape.global_batch;
  in.candidate.stages = static_cast<int>(std::max<int64_t>(1, launch.shape.stages));
  in.candidate.replicas = static_cast<int>(std::max<int64_t>(1, launch.shape.replicas));
  in.candidate.chunk_size = std::max<int64_t>(1, launch.shape.chunk_size);
  Result<planner::ScheduleKind> schedule =
      planner::ParseScheduleKind(run.settings.schedule.value_or("1f1b"));
  if (!schedule.ok()) return schedule.status();
  in.candidate.schedule = *schedule;
  in.candidate.recompute = run.settings.recompute.value_or(false);
  in.candidate.zero = run.settings.zero.value_or(false);
  std::string partition = *run.settings.partition;
  std::replace(partition.begin(), partition.end(), ',', ' ');
  std::istringstream counts(partition);
  for (int n; counts >> n;) in.candidate.partition.push_back(n);
  in.candidate.shares = launch.shares.value_or(planner::Shares{});
  in.rank_machines = launch.machines;
  return in;
}

// Where one step's time went: by instruction kind, and the compute of each stage.
struct StepSplit {
  std::map<std::string, Spent> by_kind;
  std::vector<Spent> compute_by_stage;
  int traced_ranks = 0;  // measured: the ranks whose trace was there

  explicit StepSplit(int stages) : compute_by_stage(stages) {}
  void Add(const std::string& name, int rank, double seconds) {
    const std::string kind = Kind(name);
    Spent& k = by_kind[kind];
    k.total += seconds;
    ++k.count;
    if (records::IsComputeSpan(name)) {
      compute_by_stage[rank % compute_by_stage.size()].total += seconds;
    }
  }
};

// The traced step of every rank of the generation (logs/gen-G/rank-R.trace.json).
StepSplit MeasuredSplit(FileSystem& fs, const std::string& run_dir, int64_t generation,
                        const planner::Candidate& shape) {
  StepSplit split(shape.stages);
  for (int r = 0; r < shape.stages * shape.replicas; ++r) {
    Result<std::string> text = fs.ReadFile(JoinPath(run_dir, records::StepTraceFile(generation, r)));
    if (!text.ok()) continue;
    ++split.traced_ranks;
    const nlohmann::json trace = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!trace.is_object()) continue;
    for (const auto& e : trace.value("traceEvents", nlohmann::json::array())) {
      if (e.value("ph", "") != "X") continue;
      split.Add(e.value("name", ""), r, e.value("dur", 0.0) / 1e6);
    }
  }
  return split;
}

StepSplit PredictedSplit(const planner::Prediction& predicted, int stages) {
  StepSplit split(stages);
  for (const planner::PredictedOp& op : predicted.ops) split.Add(op.name, op.rank, op.end - op.start);
  return split;
}

void PrintValidation(std::ostream& out, const std::string& run_dir, int64_t generation,
                     const planner::Candidate& shape, const planner::Prediction& predicted,
                     std::vector<double> step_times, const StepSplit& measured) {
  auto error = [](double predicted, double measured) {
    return measured > 0 ? Fixed(100 * (predicted - measured) / measured, 1) + "%" : std::string("-");
  };
  // The median step, warm-up (the first two steps) left out.
  if (step_times.size() > 2) step_times.erase(step_times.begin(), step_times.begin() + 2);
  std::sort(step_times.begin(), step_times.end());
  const double measured_step = step_times.empty() ? 0 : step_times[step_times.size() / 2];
  out << "mitra plan: generation " << generation << " of " << run_dir << ": " << shape.ToString()
      << "\n";
  out << "  step         predicted " << Fixed(predicted.step_s * 1e3, 1) << " ms  measured "
      << Fixed(measured_step * 1e3, 1) << " ms (median of " << step_times.size() << " steps)  "
      << error(predicted.step_s, measured_step) << "\n";
  if (measured.traced_ranks == 0) {
    out << "  (no step traces in logs/gen-" << generation << ": only local workers write them)\n";
    return;
  }
  const StepSplit predicted_split = PredictedSplit(predicted, shape.stages);
  out << "  compute per stage (one step, all replicas):\n";
  for (int s = 0; s < shape.stages; ++s) {
    const double p = predicted_split.compute_by_stage[s].total;
    const double m = measured.compute_by_stage[s].total;
    out << "    stage " << s << "  predicted " << Fixed(p * 1e3, 1) << " ms  measured "
        << Fixed(m * 1e3, 1) << " ms  " << error(p, m) << "\n";
  }
  out << "  per instruction (mean ms; R/Ra/Rg are waits):\n";
  for (const auto& [kind, m] : measured.by_kind) {
    auto p = predicted_split.by_kind.find(kind);
    const double pm = p == predicted_split.by_kind.end() || p->second.count == 0
                          ? 0
                          : p->second.total / p->second.count;
    const double mm = m.count ? m.total / m.count : 0;
    out << "    " << kind << std::string(8 - std::min<size_t>(7, kind.size()), ' ') << "predicted "
        << Fixed(pm * 1e3, 2) << "  measured " << Fixed(mm * 1e3, 2) << "  (" << m.count
        << " measured)\n";
  }
}

}  // namespace

int ValidateCommand(const PlanCommandOptions& o, CommandContext& c) {
  const std::string run_dir = o.validate_dir;
  Result<RecordedRun> run = ReadRecordedRun(*c.fs, run_dir, o.generation);
  if (!run.ok()) return BadInput(c, "plan", run.status().message());
  Result<planner::Profile> profile =
      LoadProfile(o.profile_dir.empty() ? JoinPath(run_dir, "profile") : o.profile_dir);
  if (!profile.ok()) return BadInput(c, "plan", profile.status().message());
  Result<planner::SimulationInput> in = SimulationOf(*run, *profile);
  if (!in.ok()) return BadInput(c, "plan", in.status().message());
  Result<planner::Prediction> predicted = planner::Simulate(*in);
  if (!predicted.ok()) return BadInput(c, "plan", predicted.status().message());
  const int64_t generation = run->launch.shape.generation;
  const StepSplit measured = MeasuredSplit(*c.fs, run_dir, generation, in->candidate);
  PrintValidation(*c.out, run_dir, generation, in->candidate, *predicted, run->step_times,
                  measured);
  c.out->flush();
  return kExitOk;
}

}  // namespace mitra::cli
