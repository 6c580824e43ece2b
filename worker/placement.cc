#include "mitra/worker/placement.h"

#include "common/free_port.h"

#include <cstdlib>
#include <cstring>


namespace mitra::worker {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

Status ReadInt(const char* name, int64_t min, int64_t* out) {
  const char* v = Env(name);
  if (!v) return Status::Ok();
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v, &end, 10);
  if (errno || *end || x < min) {
    return Status::InvalidArgument(std::string(name) + "='" + v + "' is not an integer >= " +
                                   std::to_string(min));
  }
  *out = x;
  return Status::Ok();
}

}  // namespace

bool DescribeRequested() {
  const char* v = Env("MITRA_DESCRIBE");
  return v && std::strcmp(v, "0") != 0;
}

Result<Placement> Placement::FromEnvironment() {
  Placement p;
  int64_t v = 0;
  auto read = [&](const char* name, int64_t min, auto* field) -> Status {
    v = static_cast<int64_t>(*field);
    Status s = ReadInt(name, min, &v);
    *field = static_cast<std::remove_pointer_t<decltype(field)>>(v);
    return s;
  };
  for (Status s : {read("MITRA_RANK", 0, &p.rank), read("MITRA_LOCAL_RANK", 0, &p.local_rank),
                   read("MITRA_CHUNK_SIZE", 0, &p.chunk_size),
                   read("MITRA_GLOBAL_BATCH", 0, &p.global_batch),
                   read("MITRA_MAX_STEPS", 0, &p.max_steps),
                   read("MITRA_RESUME_STEP", 0, &p.resume_step),
                   read("MITRA_RDZV_PORT", 0, &p.rdzv_port),
                   read("MITRA_GENERATION", 0, &p.generation),
                   read("MITRA_THREADS", 1, &p.threads),
                   read("MITRA_CHECKPOINT_EVERY", 0, &p.checkpoint_every),
                   read("MITRA_KEEP_CHECKPOINTS", 0, &p.keep_checkpoints)}) {
    if (!s.ok()) return s;
  }
  if (const char* t = Env("MITRA_TIMEOUT_S")) {
    char* end = nullptr;
    p.timeout_s = std::strtod(t, &end);
    if (*end || p.timeout_s <= 0) {
      return Status::InvalidArgument(std::string("MITRA_TIMEOUT_S='") + t +
                                     "' is not a positive number of seconds");
    }
  }
  p.standalone = Env("MITRA_RANK") == nullptr;
  if (const char* map = Env("MITRA_STAGE_TO_RANK_MAP")) {
    auto parsed = cutpoint::StageMap::Parse(map);
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
  if (const char* h = Env("MITRA_RDZV_HOST")) p.rdzv_host = h;
  if (const char* h = Env("MITRA_HOST")) p.host = h;
  if (const char* d = Env("MITRA_RUN_DIR")) p.run_dir = d;
  if (const char* d = Env("MITRA_CHECKPOINT_DIR")) p.checkpoint_dir = d;
  if (const char* v = Env("MITRA_SCHEDULE")) p.schedule = v;
  if (const char* v = Env("MITRA_PARTITION")) p.partition = v;
  if (const char* v = Env("MITRA_RECOMPUTE")) {
    if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0) {
      return Status::InvalidArgument(std::string("MITRA_RECOMPUTE='") + v + "' is not 0 or 1");
    }
    p.recompute = v[0] == '1';
  }
  if (p.rdzv_port == 0) {
    if (!p.standalone) {
      return Status::InvalidArgument("MITRA_RDZV_PORT is not set: the manager passes it");
    }
    auto port = PickFreeTcpPort(p.rdzv_host);
    if (!port.ok()) return port.status();
    p.rdzv_port = *port;
  }
  return p;
}

}  // namespace mitra::worker
