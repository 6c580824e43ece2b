#include "worker/heap.h"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "contract/variables.h"

namespace mitra::worker {
namespace {

// What glibc's heap keeps when freed, at the top, before it returns memory to the system.
constexpr int64_t kHeapKeeps = int64_t{1} << 30;

}  // namespace

// glibc serves allocations above its mmap threshold (128 KiB at first, adapting upwards only
// after such a block is freed) with fresh mmap'd pages and returns them on free, so every step
// pays page faults and zeroing for its activation and gradient buffers. Keeping them in the heap
// made the bench GPT ~25% faster (docs/performance.md). Memory stays at its peak instead of
// shrinking between steps, which suits a training process.
void TuneMalloc() {
  const char* setting = std::getenv(contract::kMallocTuning);
  if (setting && std::string(setting) == "0") return;
  if (mallopt(M_MMAP_THRESHOLD, 256 << 20) == 0) mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kHeapKeeps));
}

void TouchHeapAhead(int64_t bytes) {
  constexpr int64_t kBlock = 16 << 20, kPage = 4096;
  bytes = std::min(bytes, kHeapKeeps / 4 * 3);
  std::vector<void*> blocks;
  for (int64_t done = 0; done < bytes; done += kBlock) {
    void* block = std::malloc(kBlock);
    if (block == nullptr) break;
    auto* bytes_of = static_cast<volatile char*>(block);
    for (int64_t i = 0; i < kBlock; i += kPage) bytes_of[i] = 0;
    blocks.push_back(block);
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
}

std::optional<ResidentMemory> ReadResidentMemory() {
  std::ifstream in("/proc/self/smaps_rollup");
  if (!in) return std::nullopt;
  ResidentMemory memory;
  bool found_rss = false;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    int64_t kib = 0;
    if (!(fields >> name >> kib)) continue;
    if (name == "Rss:") {
      memory.resident_bytes = kib * 1024;
      found_rss = true;
    } else if (name == "AnonHugePages:") {
      memory.huge_page_bytes = kib * 1024;
    }
  }
  if (!found_rss) return std::nullopt;
  return memory;
}

}  // namespace mitra::worker
