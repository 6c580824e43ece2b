#include "manager/status_report.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "common/duration_text.h"
#include "common/strings.h"

namespace mitra::manager {
namespace {

std::optional<int64_t> GetInt(const JsonObject& json, std::string_view key) {
  const std::optional<double> value = json.GetNumber(key);
  if (!value || !std::isfinite(*value) || std::fabs(*value) > 9.0e15) return std::nullopt;
  return static_cast<int64_t>(std::llround(*value));
}

std::string GetText(const JsonObject& json, std::string_view key) {
  return json.GetString(key).value_or("");
}

void SetIfPresent(JsonObject* json, const char* key, const std::optional<int64_t>& value) {
  if (value) json->SetInt(key, *value);
}

void SetIfPresent(JsonObject* json, const char* key, const std::optional<double>& value) {
  if (value) json->SetNumber(key, *value);
}

void SetIfPresent(JsonObject* json, const char* key, const std::string& value) {
  if (!value.empty()) json->SetString(key, value);
}

// "%.4g"-like, without exponent for ordinary magnitudes: 2.3100, 5400, 0.0012.
std::string FormatNumber(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::string ClockTime(double unix_seconds) { return LocalTimeText(unix_seconds, "%H:%M:%S"); }

std::string Plural(int64_t count, const std::string& word) {
  return std::to_string(count) + " " + word + (count == 1 ? "" : "s");
}

// One machine's line after its address: "2 slots  in use 1 of 2 (1 idle)".
std::string DescribeMachine(const MachineStatus& m, double now) {
  std::string text = m.state.empty() ? "unknown" : m.state;
  if (m.state == MachineStateName(MachineState::kInUse) && m.used_slots && m.slots && *m.used_slots < *m.slots) {
    text += " " + std::to_string(*m.used_slots) + " of " + std::to_string(*m.slots) + " (" +
            std::to_string(*m.slots - *m.used_slots) + " idle)";
  }
  if (m.until) {
    text += " until " + ClockTime(*m.until) + " (in " + HumanDuration(*m.until - now) + ")";
  }
  if (!m.reason.empty()) text += ": " + m.reason;
  return text;
}

// "morph 12 s ago: machine list changed", or the record's other fields when it has no reason.
std::string DescribeEvent(const JsonObject& event, double now) {
  std::string text = event.GetString("event").value_or("event");
  if (const std::optional<double> time = event.GetNumber("time")) {
    text += " " + HumanDuration(now - *time) + " ago";
  }
  std::string detail = GetText(event, "reason");
  if (detail.empty()) detail = GetText(event, "message");
  if (detail.empty()) {
    std::vector<std::string> parts;
    for (const auto& [key, value] : event.fields()) {
      if (key == "event" || key == "time") continue;
      parts.push_back(key + "=" + (value.is_string() ? value.string_value() : value.ToJson()));
      if (parts.size() == 4) break;
    }
    detail = Join(parts, " ");
  }
  if (!detail.empty()) text += ": " + detail;
  return text;
}

}  // namespace

JsonObject StatusReport::ToJson() const {
  JsonObject json;
  json.SetBool("ok", true);
  SetIfPresent(&json, "state", state);
  SetIfPresent(&json, "reason", reason);
  SetIfPresent(&json, "manager_pid", manager_pid);
  SetIfPresent(&json, "run_dir", run_dir);
  SetIfPresent(&json, "generation", generation);
  SetIfPresent(&json, "stages", stages);
  SetIfPresent(&json, "replicas", replicas);
  SetIfPresent(&json, "step", step);
  SetIfPresent(&json, "max_steps", max_steps);
  SetIfPresent(&json, "loss", loss);
  SetIfPresent(&json, "samples_per_s", samples_per_s);
  SetIfPresent(&json, "tokens_per_s", tokens_per_s);
  SetIfPresent(&json, "elapsed_s", elapsed_s);
  SetIfPresent(&json, "updated_at", updated_at);
  std::vector<std::string> machine_texts;
  for (const MachineStatus& m : machines) {
    JsonObject machine;
    machine.SetString("address", m.address);
    SetIfPresent(&machine, "slots", m.slots);
    SetIfPresent(&machine, "state", m.state);
    SetIfPresent(&machine, "used_slots", m.used_slots);
    SetIfPresent(&machine, "until", m.until);
    SetIfPresent(&machine, "reason", m.reason);
    machine_texts.push_back(machine.ToJson());
  }
  json.Set("machines", JsonValue::Raw("[" + Join(machine_texts, ",") + "]"));
  SetIfPresent(&json, "list_rejected", list_rejected);
  if (last_event) json.Set("last_event", JsonValue::Raw(last_event->ToJson()));
  return json;
}

StatusReport StatusReport::FromJson(const JsonObject& json) {
  StatusReport r;
  r.state = GetText(json, "state");
  r.reason = GetText(json, "reason");
  r.manager_pid = GetInt(json, "manager_pid");
  r.run_dir = GetText(json, "run_dir");
  r.generation = GetInt(json, "generation");
  r.stages = GetInt(json, "stages");
  r.replicas = GetInt(json, "replicas");
  r.step = GetInt(json, "step");
  r.max_steps = GetInt(json, "max_steps");
  r.loss = json.GetNumber("loss");
  r.samples_per_s = json.GetNumber("samples_per_s");
  r.tokens_per_s = json.GetNumber("tokens_per_s");
  r.elapsed_s = json.GetNumber("elapsed_s");
  r.updated_at = json.GetNumber("updated_at");
  if (const JsonValue* machines = json.Find("machines");
      machines != nullptr && machines->type() == JsonValue::Type::kRaw) {
    Result<std::vector<JsonObject>> list = ParseJsonObjectArray(machines->string_value());
    if (list.ok()) {
      for (const JsonObject& m : *list) {
        MachineStatus machine;
        machine.address = GetText(m, "address");
        machine.slots = GetInt(m, "slots");
        machine.state = GetText(m, "state");
        machine.used_slots = GetInt(m, "used_slots");
        machine.until = m.GetNumber("until");
        machine.reason = GetText(m, "reason");
        r.machines.push_back(std::move(machine));
      }
    }
  }
  r.list_rejected = GetText(json, "list_rejected");
  if (const JsonValue* event = json.Find("last_event");
      event != nullptr && event->type() == JsonValue::Type::kRaw) {
    Result<JsonObject> parsed = JsonObject::Parse(event->string_value());
    if (parsed.ok()) r.last_event = std::move(*parsed);
  }
  return r;
}

std::string FormatStatus(const StatusReport& r, double now) {
  std::ostringstream out;
  out << (r.state.empty() ? "unknown state" : r.state);
  std::vector<std::string> headline;
  if (r.generation) headline.push_back("generation " + std::to_string(*r.generation));
  if (r.stages && r.replicas) {
    headline.push_back("shape " + std::to_string(*r.stages) + " x " +
                       std::to_string(*r.replicas) + " (" + Plural(*r.stages, "stage") + " x " +
                       Plural(*r.replicas, "replica") + ")");
  }
  if (!headline.empty()) out << ": " << Join(headline, ", ");
  out << "\n";

  auto line = [&out](const std::string& label, const std::string& value) {
    out << "  " << label << std::string(label.size() < 12 ? 12 - label.size() : 1, ' ') << value
        << "\n";
  };
  if (!r.reason.empty()) line("reason", r.reason);
  if (!r.list_rejected.empty()) {
    line("list edit", "refused, the list before it stays in force: " + r.list_rejected);
  }
  if (r.step) {
    line("step", std::to_string(*r.step) +
                     (r.max_steps && *r.max_steps > 0 ? " / " + std::to_string(*r.max_steps) : ""));
  }
  if (r.loss) line("loss", FormatNumber(*r.loss, 4));
  if (r.tokens_per_s) {
    line("throughput", FormatNumber(*r.tokens_per_s, 0) + " tokens/s");
  } else if (r.samples_per_s) {
    line("throughput", FormatNumber(*r.samples_per_s, 0) + " samples/s");
  }
  if (r.elapsed_s) line("elapsed", HumanDuration(*r.elapsed_s));
  if (!r.machines.empty()) {
    int64_t slots = 0, used = 0, idle = 0;
    for (const MachineStatus& m : r.machines) {
      const int64_t machine_slots = m.slots.value_or(0);
      const bool usable = m.state == MachineStateName(MachineState::kInUse) ||
                          m.state == MachineStateName(MachineState::kIdle);
      slots += machine_slots;
      const int64_t machine_used = m.used_slots.value_or(
          m.state == MachineStateName(MachineState::kInUse) ? machine_slots : 0);
      used += machine_used;
      if (usable) idle += std::max<int64_t>(machine_slots - machine_used, 0);
    }
    line("machines", Plural(static_cast<int64_t>(r.machines.size()), "machine") + ", " +
                         Plural(slots, "slot") + ": " + std::to_string(used) + " in use, " +
                         std::to_string(idle) + " idle");
    size_t width = 0;
    for (const MachineStatus& m : r.machines) width = std::max(width, m.address.size());
    for (const MachineStatus& m : r.machines) {
      std::string slots_text = m.slots ? Plural(*m.slots, "slot") : "";
      slots_text.resize(std::max<size_t>(slots_text.size(), 8), ' ');
      out << "    " << m.address << std::string(width - m.address.size() + 2, ' ') << slots_text
          << " " << DescribeMachine(m, now) << "\n";
    }
  }
  if (r.last_event) line("last event", DescribeEvent(*r.last_event, now));
  if (r.updated_at && !r.step && !r.last_event) line("updated", HumanDuration(now - *r.updated_at) + " ago");
  return out.str();
}

Result<std::vector<JsonObject>> ParseJsonObjectArray(std::string_view text) {
  const std::string_view trimmed = Trim(text);
  if (trimmed.size() < 2 || trimmed.front() != '[' || trimmed.back() != ']') {
    return Status::InvalidArgument("expected a JSON array of objects");
  }
  // Split at the commas between the top-level elements; each element parses on its own.
  std::vector<JsonObject> objects;
  const std::string_view body = trimmed.substr(1, trimmed.size() - 2);
  int depth = 0;
  bool in_string = false;
  size_t begin = 0;
  for (size_t i = 0; i <= body.size(); ++i) {
    const char c = i < body.size() ? body[i] : ',';
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 0) {
      const std::string_view element = Trim(body.substr(begin, i - begin));
      begin = i + 1;
      if (element.empty() && i == body.size() && objects.empty()) break;  // "[]"
      Result<JsonObject> object = JsonObject::Parse(element);
      if (!object.ok()) return object.status();
      objects.push_back(std::move(*object));
    }
  }
  if (in_string || depth != 0) return Status::InvalidArgument("unbalanced JSON array");
  return objects;
}

}  // namespace mitra::manager
