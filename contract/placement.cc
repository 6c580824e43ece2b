#include "mitra/contract/placement.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <sstream>

#include "common/duration_text.h"
#include "common/free_port.h"
#include "common/strings.h"
#include "mitra/contract/precision.h"
#include "contract/variables.h"

extern char** environ;

namespace mitra::contract {
namespace {

// The value of `name` in `env`; nullptr when unset or empty.
const std::string* Find(const Environment& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// `*out` keeps its value when `name` is unset.
template <typename Int>
Status ReadInt(const Environment& env, const char* name, int64_t min, Int* out) {
  const std::string* v = Find(env, name);
  if (!v) return Status::Ok();
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (errno || *end || x < min) {
    return Status::InvalidArgument(std::string(name) + "='" + *v + "' is not an integer >= " +
                                   std::to_string(min));
  }
  *out = static_cast<Int>(x);
  return Status::Ok();
}

// An optional setting: set when `name` is.
template <typename Int>
Status ReadInt(const Environment& env, const char* name, int64_t min, std::optional<Int>* out) {
  if (!Find(env, name)) return Status::Ok();
  Int value{};
  Status s = ReadInt(env, name, min, &value);
  if (s.ok()) *out = value;
  return s;
}

// 0 or 1, when `name` is set.
Status ReadBit(const Environment& env, const char* name, std::optional<bool>* out) {
  const std::string* v = Find(env, name);
  if (!v) return Status::Ok();
  if (*v != "0" && *v != "1") {
    return Status::InvalidArgument(std::string(name) + "='" + *v + "' is not 0 or 1");
  }
  *out = *v == "1";
  return Status::Ok();
}

Status ReadSeconds(const Environment& env, const char* name, bool zero_allowed, double* out) {
  const std::string* v = Find(env, name);
  if (!v) return Status::Ok();
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (*end || !(zero_allowed ? x >= 0 : x > 0)) {
    return Status::InvalidArgument(std::string(name) + "='" + *v + "' is not a " +
                                   (zero_allowed ? "non-negative" : "positive") +
                                   " number of seconds");
  }
  *out = x;
  return Status::Ok();
}

void ReadText(const Environment& env, const char* name, std::string* out) {
  if (const std::string* v = Find(env, name)) *out = *v;
}

std::vector<std::string> Words(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; std::getline(in, w, separator);) {
    if (!w.empty()) out.push_back(w);
  }
  return out;
}

template <typename T>
std::string Joined(const std::vector<T>& values, char separator) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += separator;
    if constexpr (std::is_same_v<T, std::string>) {
      out += values[i];
    } else {
      out += std::to_string(values[i]);
    }
  }
  return out;
}

// A list of whole numbers >= 1 separated by `separator`.
template <typename Int>
Status ReadInts(const Environment& env, const char* name, char separator, std::vector<Int>* out) {
  const std::string* v = Find(env, name);
  if (!v) return Status::Ok();
  out->clear();
  for (const std::string& word : Words(*v, separator)) {
    int64_t x = 0;
    auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), x);
    if (ec != std::errc() || end != word.data() + word.size() || x < 1) {
      return Status::InvalidArgument(std::string(name) + "='" + *v +
                                     "' is not a list of whole numbers >= 1");
    }
    out->push_back(static_cast<Int>(x));
  }
  return Status::Ok();
}

bool IsSet(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

}  // namespace

Environment ProcessEnvironment() {
  Environment env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

bool DescribeRequested() { return IsSet(kDescribe); }
bool ProfileRequested() { return IsSet(kProfile); }
bool StandbyRequested() { return IsSet(kStandby); }

std::string StandbyStage::ToString() const {
  std::string text = std::to_string(stage) + "/" + std::to_string(stages);
  return partition.empty() ? text : text + "/" + partition;
}

std::optional<StandbyStage> StandbyStage::Parse(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return std::nullopt;
  const size_t second = text.find('/', slash + 1);
  const std::string_view all(text);
  const std::optional<int64_t> stage = ParseInt64(all.substr(0, slash));
  const std::optional<int64_t> stages =
      ParseInt64(all.substr(slash + 1, second == std::string::npos ? std::string::npos
                                                                   : second - slash - 1));
  if (!stage || !stages || *stage < 0 || *stage >= *stages || *stages > (1 << 20)) {
    return std::nullopt;
  }
  StandbyStage hint{static_cast<int>(*stage), static_cast<int>(*stages), ""};
  if (second != std::string::npos) hint.partition = text.substr(second + 1);
  return hint;
}

std::optional<StandbyStage> StandbyStageOfProcess() {
  const char* v = std::getenv(kStandbyStage);
  return v ? StandbyStage::Parse(v) : std::nullopt;
}

Result<Placement> Placement::FromEnvironment() { return FromEnvironment(ProcessEnvironment()); }

Result<Placement> Placement::FromEnvironment(const Environment& env) {
  Placement p;
  for (Status s : {ReadInt(env, kRank, 0, &p.rank), ReadInt(env, kLocalRank, 0, &p.local_rank),
                   ReadInt(env, kChunkSize, 1, &p.chunk_size),
                   ReadInt(env, kGlobalBatch, 1, &p.global_batch),
                   ReadInt(env, kMaxSteps, 0, &p.max_steps),
                   ReadInt(env, kResumeStep, 0, &p.resume_step),
                   ReadInt(env, kRdzvPort, 0, &p.rdzv_port),
                   ReadInt(env, kGeneration, 0, &p.generation),
                   ReadInt(env, kThreads, 1, &p.threads),
                   ReadInt(env, kCheckpointEvery, 0, &p.checkpoint_every),
                   ReadInt(env, kKeepCheckpoints, 0, &p.keep_checkpoints),
                   ReadSeconds(env, kTimeoutS, /*zero_allowed=*/false, &p.timeout_s),
                   ReadSeconds(env, kHeartbeatS, /*zero_allowed=*/true, &p.heartbeat_s),
                   ReadBit(env, kZero, &p.zero), ReadBit(env, kRecompute, &p.recompute)}) {
    if (!s.ok()) return s;
  }
  p.standalone = Find(env, kRank) == nullptr;
  if (const std::string* map = Find(env, kStageToRankMap)) {
    Result<StageMap> parsed = StageMap::Parse(*map);
    if (!parsed.ok()) return parsed.status();
    p.stage_map = *parsed;
  } else if (!p.standalone) {
    return Status::InvalidArgument("MITRA_RANK is set but MITRA_STAGE_TO_RANK_MAP is not: start "
                                   "workers with `mitra run`, or unset MITRA_RANK to run alone");
  }
  if (p.rank >= p.stage_map.world_size()) {
    return Status::InvalidArgument("MITRA_RANK=" + std::to_string(p.rank) +
                                   " is outside the stage-to-rank map " + p.stage_map.ToString());
  }
  ReadText(env, kRdzvHost, &p.rdzv_host);
  ReadText(env, kJobToken, &p.job_token);
  if (!p.standalone && p.job_token.empty()) {
    return Status::InvalidArgument(
        "MITRA_RANK is set but MITRA_JOB_TOKEN is not: start workers with `mitra run`, or give "
        "every rank the same secret of 64 hex digits (e.g. from `openssl rand -hex 32`)");
  }
  ReadText(env, kHost, &p.host);
  ReadText(env, kRunDir, &p.run_dir);
  ReadText(env, kCheckpointDir, &p.checkpoint_dir);
  ReadText(env, kSchedule, &p.schedule);
  ReadText(env, kPartition, &p.partition);
  ReadText(env, kStepTrace, &p.step_trace);
  ReadText(env, kPrecision, &p.precision);
  ReadText(env, kDevice, &p.device);
  if (!p.precision.empty()) {
    if (Status s = CheckPrecision(p.precision, kPrecision); !s.ok()) return s;
  }
  if (!p.device.empty()) {
    if (Status s = CheckDevice(p.device, kDevice); !s.ok()) return s;
  }
  if (Status s = ReadInts(env, kShares, ',', &p.shares); !s.ok()) return s;
  std::optional<bool> park;
  if (Status s = ReadBit(env, kPark, &park); !s.ok()) return s;
  p.park = park.value_or(false);
  if (p.rdzv_port == 0) {
    if (!p.standalone) {
      return Status::InvalidArgument("MITRA_RDZV_PORT is not set: the manager passes it");
    }
    Result<int> port = PickFreeTcpPort(p.rdzv_host);
    if (!port.ok()) return port.status();
    p.rdzv_port = *port;
  }
  return p;
}

Environment Placement::ToEnvironment() const {
  Environment env;
  env[kRank] = std::to_string(rank);
  env[kLocalRank] = std::to_string(local_rank);
  env[kWorldSize] = std::to_string(world_size());
  env[kStageToRankMap] = stage_map.ToString();
  const auto set = [&env](const char* name, const auto& value) {
    if (value) env[name] = std::to_string(*value);
  };
  set(kChunkSize, chunk_size);
  set(kGlobalBatch, global_batch);
  set(kMaxSteps, max_steps);
  env[kResumeStep] = std::to_string(resume_step);
  env[kRdzvHost] = rdzv_host;
  env[kRdzvPort] = std::to_string(rdzv_port);
  if (!job_token.empty()) env[kJobToken] = job_token;
  env[kGeneration] = std::to_string(generation);
  env[kHost] = host;
  env[kThreads] = std::to_string(threads);
  env[kTimeoutS] = SecondsText(timeout_s);
  env[kHeartbeatS] = SecondsText(heartbeat_s);
  env[kRunDir] = run_dir;
  if (!checkpoint_dir.empty()) env[kCheckpointDir] = checkpoint_dir;
  set(kCheckpointEvery, checkpoint_every);
  set(kKeepCheckpoints, keep_checkpoints);
  if (!schedule.empty()) env[kSchedule] = schedule;
  set(kRecompute, recompute);
  set(kZero, zero);
  if (!partition.empty()) env[kPartition] = partition;
  if (!shares.empty()) env[kShares] = Joined(shares, ',');
  if (!step_trace.empty()) env[kStepTrace] = step_trace;
  if (park) env[kPark] = "1";
  if (!precision.empty()) env[kPrecision] = precision;
  if (!device.empty()) env[kDevice] = device;
  return env;
}

Result<ProfileRequest> ProfileRequest::FromEnvironment(const Environment& env) {
  ProfileRequest r;
  if (const std::string* machines = Find(env, kProfileMachines)) r.machines = Words(*machines, ' ');
  for (Status s : {ReadInts(env, kProfileSlots, ' ', &r.slots),
                   ReadInts(env, kProfileMicroBatches, ',', &r.micro_batches),
                   ReadInt(env, kProfileRepeats, 1, &r.repeats)}) {
    if (!s.ok()) return s;
  }
  if (r.machines.empty() || r.machines.size() != r.slots.size() || r.micro_batches.empty()) {
    return Status::InvalidArgument("MITRA_PROFILE_MACHINES, MITRA_PROFILE_SLOTS and "
                                   "MITRA_PROFILE_MICRO_BATCHES are set by `mitra profile`; run "
                                   "the program through it");
  }
  return r;
}

Environment ProfileRequest::ToEnvironment() const {
  return {{kProfile, "1"},
          {kProfileMachines, Joined(machines, ' ')},
          {kProfileSlots, Joined(slots, ' ')},
          {kProfileMicroBatches, Joined(micro_batches, ',')},
          {kProfileRepeats, std::to_string(repeats)}};
}

}  // namespace mitra::contract
