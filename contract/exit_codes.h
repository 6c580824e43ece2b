// Exit codes, of the `mitra` command and of the workers it runs (docs/worker-contract.md).
//
// A worker's exit code tells the manager how to react: 0 it is done (or stopped on request);
// 1 it failed (a lost peer, a crash): the manager recovers, within its restart budget; 2 its
// configuration is wrong (a bad flag, a placement it cannot run): retrying cannot help, so
// before the job's first step it ends the job with the worker's message. `mitra` itself exits
// with the same three codes.
#pragma once

namespace mitra {

inline constexpr int kExitOk = 0;        // done, or stopped on request
inline constexpr int kExitFailed = 1;    // a worker failed, or the manager could not go on
inline constexpr int kExitBadInput = 2;  // flags, machine list, program: fix them and retry

}  // namespace mitra
