// A control-socket request (run/control_socket.h): one line from whoever can connect to
// RUN_DIR/control.sock, read as the server reads it and answered as `mitra` answers it.
//
// The server takes the bytes up to the first '\n', parses them with JsonObject::Parse and
// hands the object to the manager's handler (ControlRequests): "stop" and unknown commands are
// answered from the request alone; "status" is answered with a StatusReport, which `mitra status` reads back with
// StatusReport::FromJson (also from state.json when no manager runs). Here the request's own
// fields stand in for the manager's snapshot, so every field of a report is reached.
//
// Invariants: a parsed request re-serializes and parses to the same fields; every response is
// one line that parses as an object with "ok" (and an "error" when not ok: the text may come
// back with bytes that are not UTF-8 replaced); a report survives ToJson -> Parse -> FromJson.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "manager/control_requests.h"
#include "manager/status_report.h"
#include "run/control_socket.h"

namespace mitra::manager {
namespace {

constexpr double kNow = 1764000000.0;

// The response as the server sends it: parsed back as the client does.
JsonObject CheckResponse(const std::string& response) {
  FUZZ_CHECK(response.find('\n') == std::string::npos);
  Result<JsonObject> parsed = JsonObject::Parse(response);
  FUZZ_CHECK(parsed.ok());
  const JsonValue* ok = parsed->Find("ok");
  FUZZ_CHECK(ok != nullptr && ok->type() == JsonValue::Type::kBool);
  return *parsed;
}

std::string ErrorResponse(const std::string& message) {
  return JsonObject().SetBool("ok", false).SetString("error", message).ToJson();
}

bool Same(const std::optional<double>& a, const std::optional<double>& b) {
  return a.has_value() == b.has_value() && (!a || *a == *b);
}

void CheckSameReport(const StatusReport& a, const StatusReport& b) {
  FUZZ_CHECK(a.state == b.state);
  FUZZ_CHECK(a.reason == b.reason);
  FUZZ_CHECK(a.manager_pid == b.manager_pid);
  FUZZ_CHECK(a.run_dir == b.run_dir);
  FUZZ_CHECK(a.generation == b.generation);
  FUZZ_CHECK(a.stages == b.stages);
  FUZZ_CHECK(a.replicas == b.replicas);
  FUZZ_CHECK(a.step == b.step);
  FUZZ_CHECK(a.max_steps == b.max_steps);
  FUZZ_CHECK(Same(a.loss, b.loss));
  FUZZ_CHECK(Same(a.samples_per_s, b.samples_per_s));
  FUZZ_CHECK(Same(a.tokens_per_s, b.tokens_per_s));
  FUZZ_CHECK(Same(a.elapsed_s, b.elapsed_s));
  FUZZ_CHECK(Same(a.updated_at, b.updated_at));
  FUZZ_CHECK(a.machines.size() == b.machines.size());
  for (size_t i = 0; i < a.machines.size(); ++i) {
    FUZZ_CHECK(a.machines[i].address == b.machines[i].address);
    FUZZ_CHECK(a.machines[i].slots == b.machines[i].slots);
    FUZZ_CHECK(a.machines[i].state == b.machines[i].state);
    FUZZ_CHECK(a.machines[i].used_slots == b.machines[i].used_slots);
    FUZZ_CHECK(Same(a.machines[i].until, b.machines[i].until));
    FUZZ_CHECK(a.machines[i].reason == b.machines[i].reason);
  }
  FUZZ_CHECK(a.last_event.has_value() == b.last_event.has_value());
  if (a.last_event) FUZZ_CHECK(a.last_event->ToJson() == b.last_event->ToJson());
}

void Answer(const JsonObject& request) {
  // The manager's own answers (control_requests.h); the request's fields stand in for the run's
  // snapshot (which never holds "ok").
  JsonObject snapshot = request;
  snapshot.Erase("ok");
  std::string drained;
  ControlRequests requests(
      {[] {}, [&snapshot] { return snapshot; }, [&drained](const std::string& a) { drained = a; }},
      "/runs/fuzz", 42);
  const JsonObject response = CheckResponse(requests.Answer(request));
  const std::string command = request.GetString("command").value_or("");
  const bool ok = response.Find("ok")->bool_value();
  if (command != kStopCommand && command != kStatusCommand && command != kDrainCommand) {
    FUZZ_CHECK(!ok);
  }
  if (!ok) FUZZ_CHECK(!response.GetString("error").value_or("").empty());
  // A drain is asked only for a machine the snapshot lists.
  if (!drained.empty()) {
    FUZZ_CHECK(command == kDrainCommand && request.GetString("machine") == drained);
  }
  // The status answer (built for every request, so that any field can reach it), and what
  // `mitra status` makes of it.
  const StatusReport report = StatusReport::FromJson(request);
  const JsonObject answer = CheckResponse(report.ToJson().ToJson());
  const StatusReport back = StatusReport::FromJson(answer);
  CheckSameReport(report, back);
  FUZZ_CHECK(!FormatStatus(back, kNow).empty());
}

}  // namespace
}  // namespace mitra::manager

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mitra::manager;
  std::string_view line(reinterpret_cast<const char*>(data), size);
  const size_t max_request_bytes = mitra::run::ControlServerOptions().max_request_bytes;
  const size_t newline = line.find('\n');
  if (newline == std::string_view::npos && line.size() > max_request_bytes) return 0;
  line = line.substr(0, newline);
  mitra::Result<mitra::JsonObject> request = mitra::JsonObject::Parse(line);
  if (!request.ok()) {
    const std::string error = "bad request: " + request.status().message();
    const mitra::JsonObject response = CheckResponse(ErrorResponse(error));
    FUZZ_CHECK(!response.GetString("error").value_or("").empty());
    return 0;
  }
  mitra::fuzz::CheckJsonRoundTrip(*request);
  Answer(*request);
  return 0;
}
