// What `mitra status` shows: the status response of the control socket (control_socket.h),
// as a struct the manager fills and the command prints.
//
// Request {"command":"status"} -> one line, every field but "ok" optional:
//
//   {"ok":true,
//    "state":"running",          running | morphing | waiting | recovering | stopping (and, in
//                                state.json, done | stopped | failed)
//    "reason":"...",             why the manager is in that state ("waiting for 2 more slots")
//    "manager_pid":4242, "run_dir":"/abs/mitra-run",
//    "generation":3, "stages":2, "replicas":2,   the shape P x D of the running generation
//    "step":120, "max_steps":500, "loss":2.31, "tokens_per_s":5400, "elapsed_s":812.5,
//    "updated_at":1764000000.0,  Unix seconds of the newest fact in the report
//    "machines":[                one per machine of the list in force
//      {"address":"127.0.0.2","slots":2,"state":"in use","used_slots":2},
//      {"address":"127.0.0.4","slots":2,"state":"in use","used_slots":1},   one slot idle
//      {"address":"127.0.0.5","slots":1,"state":"idle","used_slots":0},
//      {"address":"127.0.0.3","slots":1,"state":"failed","until":1764000040.0,
//       "reason":"ssh exited with 255"}],        kept out until `until` (Unix seconds)
//    "list_rejected":"...",      the last edit of the machine list did not parse (why): the
//                                list before it stays in force; absent once an edit parses
//    "last_event":{"time":1764000000.0,"event":"morph","reason":"machine list changed"}}
//
// Request {"command":"stop"} -> {"ok":true,"message":"stopping: every worker will checkpoint
// after the same step"} (message: what the manager does, printed as is by `mitra stop`).
//
// Any request may be answered {"ok":false,"error":"..."} (unknown command, already stopping).
//
// state.json holds the same names for the fields it has, so a StatusReport is also read from
// it when no manager runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "manager/machine_state.h"

namespace mitra::manager {

inline constexpr const char* kStatusCommand = "status";
inline constexpr const char* kStopCommand = "stop";
inline constexpr const char* kDrainCommand = "drain";  // with "machine": an address

struct MachineStatus {
  std::string address;  // as Machine::Address() writes it
  std::optional<int64_t> slots;
  // A MachineStateName, or whatever the manager that answered says: kept as its text.
  std::string state;
  std::optional<int64_t> used_slots;
  std::optional<double> until;  // Unix seconds: a failed machine is kept out until then
  std::string reason;           // why it failed
};

// Plain data; fields left unset are not written and not shown.
struct StatusReport {
  std::string state;
  std::string reason;
  std::optional<int64_t> manager_pid;
  std::string run_dir;
  std::optional<int64_t> generation;
  std::optional<int64_t> stages;
  std::optional<int64_t> replicas;
  std::optional<int64_t> step;
  std::optional<int64_t> max_steps;
  std::optional<double> loss;
  std::optional<double> samples_per_s;
  std::optional<double> tokens_per_s;  // programs that declare tokens per sample
  std::optional<double> elapsed_s;
  std::optional<double> updated_at;
  std::vector<MachineStatus> machines;
  std::string list_rejected;  // why the last edit of the machine list was refused, if it was
  std::optional<JsonObject> last_event;  // an events.jsonl record, flat

  // The response object, "ok":true first.
  JsonObject ToJson() const;
  // Reads what is there: a missing field, or one of the wrong type, stays unset; a malformed
  // "machines" or "last_event" is ignored. Never fails.
  static StatusReport FromJson(const JsonObject& json);
};

// Human-readable text for the terminal, several lines, each ending in '\n':
//
//   running: generation 3, shape 2 x 2 (2 stages x 2 replicas)
//     step        120 / 500
//     loss        2.3100
//     throughput  5400 tokens/s   (samples/s for a program without tokens)
//     machines    3 machines, 5 slots: 4 in use, 1 idle
//       127.0.0.2  2 slots  in use
//       127.0.0.3  1 slot   failed until 14:02:05 (in 40 s): ssh exited with 255
//     last event  morph 12 s ago: machine list changed
//
// `now` (Unix seconds) turns times into "in 40 s" and "12 s ago"; clock times are local.
std::string FormatStatus(const StatusReport& report, double now);

// Parses the JSON text of an array of objects ("[{...},{...}]"); InvalidArgument otherwise.
Result<std::vector<JsonObject>> ParseJsonObjectArray(std::string_view text);

}  // namespace mitra::manager
