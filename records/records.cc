#include "records/records.h"

namespace mitra::records {

std::string GenerationLogDir(int64_t generation) { return "logs/gen-" + std::to_string(generation); }

std::string StepTraceName(int rank) { return "rank-" + std::to_string(rank) + ".trace.json"; }

std::string StepTraceFile(int64_t generation, int rank) {
  return GenerationLogDir(generation) + "/" + StepTraceName(rank);
}

}  // namespace mitra::records
