// What a worker tells the manager (docs/worker-contract.md, "What a worker tells the manager"):
// one struct per kind of `@mitra` record, each JSON field named once in its Fields()
// (common/json_fields.h), and WorkerMessage, the variant of them all.
//
// The worker writes a message with MessageLine (worker/comm/report.h prints it); the manager
// reads a line with ParseWorkerMessage, once, and dispatches on the variant
// (run/run_loop_output.cc), so a field or a kind renamed here is renamed for both, and a kind
// added here fails to compile in every std::visit that does not say what it does with it. contract_test holds each kind and
// its fields against the docs' table, both ways.
//
// Reading is lenient, as for the run directory's records: a worker may be a program of the
// user's that follows the docs (tests/common/fake_worker.cc is one), so a missing field keeps
// its member's default, an optional stays empty, fields a kind does not name are kept beside it
// (an evaluation's metrics; a program's own fields, which pass through to events.jsonl) as are
// those it names but cannot read (null, JSON's stand-in for a NaN; another type), which pass
// through as they came, and a
// kind this mitra does not know parses as Unknown. Only the counts a record means nothing
// without are checked: a step's number and a program's segments.
//
// Plain values: copyable, no synchronization.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/json.h"
#include "common/json_fields.h"
#include "mitra/common/status.h"

namespace mitra::contract {

// A line a worker prints is a message when it starts with this; the rest is one JSON object.
inline constexpr std::string_view kMessagePrefix = "@mitra ";

namespace message {

// The program's model, when started with MITRA_DESCRIBE=1: it prints this and exits.
struct Describe {
  static constexpr const char* kEvent = "describe";
  int64_t segments = 0;
  double tokens_per_sample = 0;  // 0: not a language model
  bool micro_batch_independent = false;
  // Every parameter and buffer as `<segment>.<name>[d0,d1,...]`, space-separated.
  std::optional<std::string> parameters, buffers;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("segments", r.segments), f("tokens_per_sample", r.tokens_per_sample);
    f("micro_batch_independent", r.micro_batch_independent);
    f("parameters", r.parameters), f("buffers", r.buffers);
  }
};

// The program runs (printed as early as it can, before anything slow).
struct Starting {
  static constexpr const char* kEvent = "starting";
  int64_t rank = 0;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("rank", r.rank);
  }
};

// The rank's rendezvous is complete.
struct Ready {
  static constexpr const char* kEvent = "ready";
  int64_t rank = 0, stages = 0, replicas = 0, generation = 0;
  bool park = false;          // it parks when a morph asks (SIGUSR2)
  std::optional<bool> hold;   // false: parked, it would not hold its stage's whole state; absent: true

  bool Holds() const { return hold.value_or(true); }

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("rank", r.rank), f("stages", r.stages), f("replicas", r.replicas);
    f("generation", r.generation), f("park", r.park), f("hold", r.hold);
  }
};

// What optimizer state the rank holds, after its generation's first step.
struct OptimizerState {
  static constexpr const char* kEvent = "optimizer_state";
  int64_t rank = 0, bytes = 0;
  bool sharded = false;  // ZeRO-1

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("rank", r.rank), f("bytes", r.bytes), f("sharded", r.sharded);
  }
};

// The rank's resident memory after its generation's first step.
struct Memory {
  static constexpr const char* kEvent = "memory";
  int64_t rank = 0, resident_bytes = 0, huge_page_bytes = 0;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("rank", r.rank), f("resident_bytes", r.resident_bytes);
    f("huge_page_bytes", r.huge_page_bytes);
  }
};

// Rank 0's effective settings, after `ready`.
struct Settings {
  static constexpr const char* kEvent = "settings";
  std::string text;  // what the terminal shows
  std::optional<std::string> schedule, partition;
  std::optional<bool> recompute, zero;
  std::optional<int64_t> chunk_size;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("text", r.text), f("schedule", r.schedule), f("recompute", r.recompute);
    f("zero", r.zero), f("partition", r.partition), f("chunk_size", r.chunk_size);
  }
};

// Profiling: a machine's profile (planner/profile.h's MachineProfile as JSON).
struct ProfileMachine {
  static constexpr const char* kEvent = "profile_machine";
  int64_t machine = -1;  // its index in the machine list
  fields::RawJson profile;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("machine", r.machine), f("profile", r.profile);
  }
};

// Profiling: the links, the all-reduce and the step's sync (planner/profile.h's CommProfile).
struct ProfileComm {
  static constexpr const char* kEvent = "profile_comm";
  fields::RawJson profile;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("profile", r.profile);
  }
};

// A step trained (rank 0).
struct Step {
  static constexpr const char* kEvent = "step";
  int64_t step = 0;  // completed steps, 1-based
  std::optional<double> loss;  // absent or null: not a number (a diverged loss)
  int64_t samples = 0;
  std::optional<double> samples_per_s;  // absent: samples / step_time_s
  std::optional<int64_t> tokens;        // only with tokens per sample
  std::optional<double> tokens_per_s;
  double step_time_s = 0;
  std::optional<int64_t> stages, replicas, generation;  // absent: the manager's plan's
  std::optional<double> lr, grad_norm;
  std::optional<double> loss_scale;  // fp16's, with `skipped`
  std::optional<bool> skipped;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("step", r.step), f("loss", r.loss), f("samples", r.samples);
    f("samples_per_s", r.samples_per_s), f("tokens", r.tokens), f("tokens_per_s", r.tokens_per_s);
    f("step_time_s", r.step_time_s), f("stages", r.stages), f("replicas", r.replicas);
    f("generation", r.generation), f("lr", r.lr), f("grad_norm", r.grad_norm);
    f("loss_scale", r.loss_scale), f("skipped", r.skipped);
  }
};

// An evaluation pass (rank 0); each metric's mean is a field beside these, named as the metric.
struct Eval {
  static constexpr const char* kEvent = "eval";
  int64_t step = 0, samples = 0;
  std::optional<double> loss;  // the mean over the samples; absent or null: not a number
  double seconds = 0;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("step", r.step), f("samples", r.samples), f("loss", r.loss), f("seconds", r.seconds);
  }
};

// A checkpoint is complete (rank 0).
struct Checkpoint {
  static constexpr const char* kEvent = "checkpoint";
  int64_t step = 0;
  std::optional<std::string> path;
  std::optional<double> blocked_s;  // the training loop blocked while tensors were copied
  std::optional<double> total_s;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("step", r.step), f("path", r.path), f("blocked_s", r.blocked_s), f("total_s", r.total_s);
  }
};

// The rank's part of a checkpoint could not be written; training goes on.
struct CheckpointFailed {
  static constexpr const char* kEvent = "checkpoint_failed";
  int64_t step = 0;
  std::string error;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("step", r.step), f("error", r.error);
  }
};

// Something the user should know that does not stop training.
struct Warning {
  static constexpr const char* kEvent = "warning";
  std::string message;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("message", r.message);
  }
};

// Rank 0: the placement replaces settings the program changed from the runtime's defaults.
struct SettingsReplaced {
  static constexpr const char* kEvent = "settings_replaced";
  std::string message;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("message", r.message);
  }
};

// Every second, from a thread of its own; once the rank trains also its steps since the last.
struct Heartbeat {
  static constexpr const char* kEvent = "heartbeat";
  int64_t rank = 0;
  std::optional<int64_t> steps, step;  // the steps since the previous heartbeat, the last
  std::optional<double> compute_s, wait_s;  // mean seconds per step computing, waiting for peers

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("rank", r.rank), f("steps", r.steps), f("step", r.step), f("compute_s", r.compute_s);
    f("wait_s", r.wait_s);
  }
};

// Rank 0: every rank has the state it resumes from. The rest after a resume in a managed job.
struct Restored {
  static constexpr const char* kEvent = "restored";
  int64_t step = 0;
  double seconds = 0;
  // Ranks by where their state came from, and each rank's: "kept", "peer" or "checkpoint".
  std::optional<int64_t> kept, peer, from_checkpoint;
  std::optional<std::vector<std::string>> sources;
  std::optional<int64_t> peer_bytes;
  std::optional<double> transfer_s, peer_bytes_per_s, first_step_wait_s;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("step", r.step), f("seconds", r.seconds), f("kept", r.kept), f("peer", r.peer);
    f("from_checkpoint", r.from_checkpoint), f("peer_bytes", r.peer_bytes);
    f("peer_bytes_per_s", r.peer_bytes_per_s), f("transfer_s", r.transfer_s);
    f("first_step_wait_s", r.first_step_wait_s), f("sources", r.sources);
  }
};

// The rank left the training loop normally.
struct Stopped {
  static constexpr const char* kEvent = "stopped";
  static constexpr const char* kMaxSteps = "max_steps";  // a `reason`; the other is "signal"
  int64_t rank = 0, step = 0;
  std::string reason;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("rank", r.rank), f("step", r.step), f("reason", r.reason);
  }
};

// The rank waits for its next place (docs/worker-contract.md, "Parking"); with what it holds in
// memory: the segments [held_first_segment, held_end_segment) of its stage after held_step
// steps. A standby worker, which has no place yet, says rank -1 and step -1.
struct Parked {
  static constexpr const char* kEvent = "parked";
  int64_t rank = 0, step = 0;
  std::optional<int64_t> held_step, held_first_segment, held_end_segment, held_bytes;

  template <class Self, class F>
  static void Fields(Self& r, F&& f) {
    f("rank", r.rank), f("step", r.step), f("held_step", r.held_step);
    f("held_first_segment", r.held_first_segment), f("held_end_segment", r.held_end_segment);
    f("held_bytes", r.held_bytes);
  }
};

// A kind this mitra does not know (a newer worker's, say): read by no one.
struct Unknown {
  std::string event;
};

}  // namespace message

using WorkerMessage =
    std::variant<message::Describe, message::Starting, message::Ready, message::OptimizerState,
                 message::Memory, message::Settings, message::ProfileMachine,
                 message::ProfileComm, message::Step, message::Eval, message::Checkpoint,
                 message::CheckpointFailed, message::Warning, message::SettingsReplaced,
                 message::Heartbeat, message::Restored, message::Stopped, message::Parked,
                 message::Unknown>;

// A message as read: the kind, and the fields the kind does not name (an evaluation's metrics,
// a program's own fields) or could not read (null, another type), in the order they came.
struct ReadMessage {
  WorkerMessage message;
  JsonObject more;
};

// `json`: the text after kMessagePrefix. InvalidArgument, naming what is wrong, for text that
// is not one JSON object, has no string "event", or a `step` or `describe` record whose count
// (step, segments) is not a whole number from 1 (up to 9e15 steps, 1,000,000 segments).
Result<ReadMessage> ParseWorkerMessage(std::string_view json);

// The kind's name ("step"); Unknown's own.
std::string_view EventOf(const WorkerMessage& message);

// The message as its JSON object: "event" first, the kind's fields in their order, then the rest
// of `more`'s. A field of `more` that the kind names takes that field's place with its value (as
// read: one the kind could not read, a null loss say).
template <class Message>
JsonObject MessageJson(const Message& message, const JsonObject& more = {}) {
  JsonObject o;
  o.SetString("event", Message::kEvent);
  Message::Fields(message, [&](const char* key, const auto& value) {
    if (const JsonValue* as_read = more.Find(key)) {
      o.Set(key, *as_read);
    } else {
      fields::detail::Put(o, key, value);
    }
  });
  for (const auto& [key, value] : more.fields()) {
    if (!o.Has(key)) o.Set(key, value);
  }
  return o;
}

// The message's fields without "event" (what the manager records of it), `more`'s after them.
template <class Message>
JsonObject MessageFields(const Message& message, const JsonObject& more = {}) {
  JsonObject o = MessageJson(message, more);
  o.Erase("event");
  return o;
}

// The whole line a worker prints: kMessagePrefix, the JSON object, "\n".
template <class Message>
std::string MessageLine(const Message& message, const JsonObject& more = {}) {
  return std::string(kMessagePrefix) + MessageJson(message, more).ToJson() + "\n";
}

}  // namespace mitra::contract
