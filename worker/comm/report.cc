#include "worker/comm/report.h"

#include <cstdio>

namespace mitra::worker {

void EmitLine(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace mitra::worker
