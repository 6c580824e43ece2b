// The worker process's memory: glibc's malloc set up for training (TuneMalloc), memory touched
// ahead of the step that will need it (TouchHeapAhead), and what the process holds
// (ResidentMemory).
//
// The manager also starts every worker with GLIBC_TUNABLES=glibc.malloc.hugetlb=1
// (run/worker_env.h): glibc then asks for transparent huge pages for the memory it takes from
// the system, which only an environment variable at the process's start can do.
// MITRA_MALLOC_TUNING=0 turns all of it off (docs/performance.md).
#pragma once

#include <cstdint>
#include <optional>

namespace mitra::worker {

// Keeps freed blocks in the heap up to 1 GiB and serves blocks up to 256 MiB (32 MiB where
// glibc refuses more) from it. Unless MITRA_MALLOC_TUNING=0. Call before the first large
// allocation; calling it again changes nothing.
void TuneMalloc();

// Allocates about `bytes` (at most 768 MiB) in blocks the heap serves after TuneMalloc, writes
// to every page and frees them: the process's next allocations reuse those pages instead of
// faulting in new ones. Blocks while it writes: a page fault for each page written first, of
// 4 KiB or, where the heap has them, 2 MiB.
void TouchHeapAhead(int64_t bytes);

// What /proc/self/smaps_rollup says the process holds in memory, and how much of it is on
// transparent huge pages. nullopt where that file cannot be read (an older kernel, no /proc).
struct ResidentMemory {
  int64_t resident_bytes = 0;
  int64_t huge_page_bytes = 0;
};
std::optional<ResidentMemory> ReadResidentMemory();

}  // namespace mitra::worker
