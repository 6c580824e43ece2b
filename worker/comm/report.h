// The worker's side of docs/worker-contract.md's messages: Emit prints one (a struct of
// contract/worker_messages.h) as a `@mitra {...}` line on stdout.
//
//   contract::message::Warning warning;
//   warning.message = "resuming with another seed";
//   Emit(warning);
//
// The whole line goes out with one write and a flush, so messages never interleave with log
// text mid-line, also from the heartbeat's thread. Thread-safe.
#pragma once

#include <string>

#include "common/json.h"
#include "contract/worker_messages.h"

namespace mitra::worker {

// Writes `line` (a whole line, "\n" included) to stdout with one write and flushes.
void EmitLine(const std::string& line);

// `more`: fields beside the kind's own (an evaluation's metrics).
template <class Message>
void Emit(const Message& message, const JsonObject& more = {}) {
  EmitLine(contract::MessageLine(message, more));
}

}  // namespace mitra::worker
