#include "cli/planner_commands.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/flags.h"
#include "cli/run_command.h"
#include "common/file_system.h"
#include "common/strings.h"
#include "manager/machine_list.h"
#include "planner/planner.h"
#include "report/plan_validation.h"
#include "run/machine_list_file.h"
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

// The machines in the order `s`'s ranks fill them.
std::vector<std::string> MachineOrder(const planner::PlannedShape& s,
                                      const std::vector<planner::MachineSlots>& machines) {
  std::vector<std::string> out;
  for (const planner::MachineSlots& m : planner::InOrder(machines, s.machine_order)) {
    out.push_back(m.address);
  }
  return out;
}

std::string CandidateJson(const planner::PlannedShape& s,
                          const std::vector<planner::MachineSlots>& machines) {
  const planner::Candidate& c = s.candidate;
  std::ostringstream out;
  out << "{\"stages\":" << c.stages << ",\"replicas\":" << c.replicas
      << ",\"chunk_size\":" << c.chunk_size
      << ",\"schedule\":" << Quote(planner::ScheduleName(c.schedule))
      << ",\"recompute\":" << (c.recompute ? "true" : "false")
      << ",\"zero\":" << (c.zero && c.replicas > 1 ? 1 : 0)
      << ",\"partition\":" << Quote(c.PartitionText())
      << ",\"shares\":" << Quote(planner::Uneven(c.shares) ? planner::SharesText(c.shares) : "");
  if (!s.machine_order.empty()) {  // not the list's order
    const std::vector<std::string> order = MachineOrder(s, machines);
    out << ",\"machine_order\":[";
    for (size_t i = 0; i < order.size(); ++i) out << (i ? "," : "") << Quote(order[i]);
    out << "]";
  }
  out << ",\"idle_slots\":" << s.idle_slots
      << ",\"predicted_step_s\":" << s.prediction.step_s
      << ",\"predicted_memory_bytes\":" << s.prediction.max_memory_bytes
      << ",\"bubble_fraction\":" << s.prediction.bubble_fraction << "}";
  return out.str();
}

// The table of the `shown` best shapes of `plan` for a batch of `batch` on `machines`, each
// followed by its pipelines' partitions where each has its own, and by its machine order where
// that is not the list's.
void PrintShapes(std::ostream& out, const planner::PlanResult& plan, size_t shown, int64_t batch,
                 const std::vector<planner::MachineSlots>& machines) {
  out << "  #  shape      micro-batch  schedule          partition             idle  step s    "
         "samples/s  memory MB  bubble  shares\n";
  for (size_t i = 0; i < shown; ++i) {
    const planner::PlannedShape& s = plan.candidates[i];
    const planner::Candidate& k = s.candidate;
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%3zu  %-9s  %-11lld  %-16s  %-20s  %4d  %-8s  %-9s  %-9s  %.2f    ",
                  i + 1, (std::to_string(k.stages) + " x " + std::to_string(k.replicas)).c_str(),
                  static_cast<long long>(k.chunk_size),
                  k.ScheduleText().c_str(),
                  k.pipelines.empty() ? k.PartitionText().c_str() : "per pipeline", s.idle_slots,
                  Fixed(s.prediction.step_s, 4).c_str(),
                  Fixed(static_cast<double>(batch) / s.prediction.step_s, 1).c_str(),
                  Fixed(static_cast<double>(s.prediction.max_memory_bytes) / 1e6, 1).c_str(),
                  s.prediction.bubble_fraction);
    out << line << (planner::Uneven(k.shares) ? planner::SharesText(k.shares) : "even") << "\n";
    if (!k.pipelines.empty()) {
      out << "     each pipeline cut for its machines: " << k.PartitionText() << "\n";
    }
    if (!s.machine_order.empty()) {
      out << "     its ranks fill the machines in the order " << Join(MachineOrder(s, machines), ", ")
          << "\n";
    }
  }
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

int ProfileCommand(const ProfileCommandOptions& o, CommandContext& c) {
  Result<run::MachineListFile> file = run::ReadMachineList(*c.fs, o.machines_path, o.gpus_per_node);
  if (!file.ok()) return BadInput(c, "profile", file.status().message());
  const manager::MachineList& machines = file->list;
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
  for (const manager::Machine& m : machines.machines) {
    names.push_back(m.Address() + " (" + std::to_string(m.slots) + (m.slots == 1 ? " slot)" : " slots)"));
  }
  *c.out << "mitra: profiling '" << *program << "' on " << Join(names, ", ") << std::endl;
  const double start = c.clock->MonotonicSeconds();
  Result<planner::Profile> profile = run::ProfileProgram(*c.transports, machines, job, *c.clock);
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
  Result<planner::Profile> profile = run::LoadProfile(*c.fs, o.profile_dir);
  if (!profile.ok()) return BadInput(c, "plan", profile.status().message());
  planner::PlanRequest request;
  request.profile = &*profile;
  request.global_batch = o.batch_size;
  request.stages = o.stages;
  request.chunk_size = o.chunk_size;
  request.keep = o.top;
  if (!o.machines_path.empty()) {
    Result<run::MachineListFile> file = run::ReadMachineList(*c.fs, o.machines_path, o.gpus_per_node);
    if (!file.ok()) return BadInput(c, "plan", file.status().message());
    for (const manager::Machine& m : file->list.machines) request.machines.push_back({m.Address(), m.slots});
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
    in.rank_machines =
        planner::PlaceRanks(planner::InOrder(request.machines, plan->candidates.front().machine_order),
                            in.candidate.stages * in.candidate.replicas);
    in.trace = true;
    Result<planner::Prediction> traced = planner::Simulate(in);
    if (traced.ok()) {
      if (Status s = WriteFile(o.trace_path, traced->trace); !s.ok()) {
        return BadInput(c, "plan", s.message());
      }
    }
  }
  const size_t shown = std::min<size_t>(plan->candidates.size(), static_cast<size_t>(o.top));
  const std::vector<double> speeds = planner::RelativeSpeeds(*profile, request.machines);
  if (o.json) {
    std::ostringstream out;
    out << "{\"planning_s\":" << planning_s << ",\"slots\":" << slots
        << ",\"global_batch\":" << o.batch_size << ",\"considered\":" << plan->considered
        << ",\"simulated\":" << plan->simulated
        << ",\"too_big\":" << plan->too_big << ",\"machine_speeds\":{";
    for (size_t i = 0; i < speeds.size(); ++i) {
      out << (i ? "," : "") << Quote(request.machines[i].address) << ":" << Fixed(speeds[i], 3);
    }
    out << "},\"best\":" << CandidateJson(plan->candidates[0], request.machines)
        << ",\"candidates\":[";
    for (size_t i = 0; i < shown; ++i) {
      out << (i ? "," : "") << CandidateJson(plan->candidates[i], request.machines);
    }
    out << "]}";
    *c.out << out.str() << std::endl;
    return kExitOk;
  }
  *c.out << "mitra plan: " << slots << (slots == 1 ? " slot" : " slots") << ", batch "
         << o.batch_size << ": " << plan->considered << " shapes considered, "
         << plan->simulated << " simulated in " << Fixed(planning_s, 3) << " s ("
         << plan->too_big << " too big for memory)\n";
  // Machines that differ: their speeds, which uneven shares follow.
  if (std::any_of(speeds.begin(), speeds.end(), [](double s) { return s < 0.95; })) {
    *c.out << "  machine speeds (the fastest's forward and backward over each one's):";
    for (size_t i = 0; i < speeds.size(); ++i) {
      *c.out << " " << request.machines[i].address << " " << Fixed(speeds[i], 2);
    }
    *c.out << "\n";
  }
  PrintShapes(*c.out, *plan, shown, o.batch_size, request.machines);
  c.out->flush();
  return kExitOk;
}

}  // namespace mitra::cli

namespace mitra::cli {

int ValidateCommand(const PlanCommandOptions& o, CommandContext& c) {
  Result<report::PlanValidation> validation = report::ValidatePlan(
      *c.fs, o.validate_dir, o.generation,
      o.profile_dir.empty() ? JoinPath(o.validate_dir, "profile") : o.profile_dir);
  if (!validation.ok()) return BadInput(c, "plan", validation.status().message());
  *c.out << report::FormatPlanValidation(*validation);
  c.out->flush();
  return kExitOk;
}

}  // namespace mitra::cli
