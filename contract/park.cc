#include "contract/park.h"

#include <algorithm>
#include <iterator>

#include "common/json.h"
#include "contract/variables.h"

namespace mitra::contract {

std::string PlacementLine(const Environment& environment) {
  JsonObject placement;
  for (const char* name : kManagedVariables) {
    const auto it = environment.find(name);
    if (it != environment.end()) placement.SetString(name, it->second);
  }
  return JsonObject().Set("placement", JsonValue::Raw(placement.ToJson())).ToJson();
}

std::string ExitLine() { return JsonObject().SetBool("exit", true).ToJson(); }

Result<ParkOrder> ParseParkLine(std::string_view line) {
  const std::string shown(line.substr(0, 80));
  Result<JsonObject> parsed = JsonObject::Parse(line);
  if (!parsed.ok()) {
    return Status::InvalidArgument("a parked worker was sent '" + shown +
                                   "', not a JSON object: " + parsed.status().message());
  }
  if (parsed->Find("exit") != nullptr && parsed->Find("exit")->bool_value()) return ParkOrder{};
  const JsonValue* value = parsed->Find("placement");
  Result<JsonObject> placement = Status::InvalidArgument("");
  if (value != nullptr && value->type() == JsonValue::Type::kRaw) {
    placement = JsonObject::Parse(value->string_value());  // a nested value stays JSON text
  }
  if (!placement.ok()) {
    return Status::InvalidArgument("a parked worker was sent '" + shown +
                                   "': neither {\"placement\":{...}} nor {\"exit\":true}");
  }
  Environment env;
  for (const auto& field : placement->fields()) {
    const std::string& name = field.first;  // a lambda may not capture a structured binding (C++17)
    const JsonValue& value = field.second;
    const bool known = std::any_of(std::begin(kManagedVariables), std::end(kManagedVariables),
                                   [&](const char* managed) { return name == managed; });
    if (!known || !value.is_string()) {
      return Status::InvalidArgument("a parked worker's placement holds '" + name +
                                     "', not a string variable of the worker contract");
    }
    env[name] = value.string_value();
  }
  return ParkOrder{std::move(env)};
}

}  // namespace mitra::contract
