#include "records/records.h"

#include <nlohmann/json.hpp>

namespace mitra::records {

std::string GenerationLogDir(int64_t generation) { return "logs/gen-" + std::to_string(generation); }

std::string StepTraceName(int rank) { return "rank-" + std::to_string(rank) + ".trace.json"; }

std::string StepTraceFile(int64_t generation, int rank) {
  return GenerationLogDir(generation) + "/" + StepTraceName(rank);
}

bool IsComputeSpan(std::string_view name) {
  if (name == "update") return true;
  if (name.empty()) return false;
  const char op = name[0];
  const bool digit_next = name.size() > 1 && name[1] >= '0' && name[1] <= '9';
  return op == 'F' || op == 'f' || op == 'B' || ((op == 'R' || op == 'W') && digit_next);
}

}  // namespace mitra::records

namespace mitra::records::detail {
namespace {

// Arrays are kept as raw JSON text by JsonObject (common/json.h).
template <class T>
void GetArray(const JsonObject& o, const char* key, std::vector<T>* v) {
  const JsonValue* value = o.Find(key);
  if (value == nullptr || value->type() != JsonValue::Type::kRaw) return;
  const nlohmann::json array =
      nlohmann::json::parse(value->string_value(), nullptr, /*allow_exceptions=*/false);
  if (!array.is_array()) return;
  std::vector<T> out;
  for (const nlohmann::json& item : array) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (!item.is_string()) return;
      out.push_back(item.get<std::string>());
    } else {
      if (!item.is_number_integer()) return;
      out.push_back(item.get<int64_t>());
    }
  }
  *v = std::move(out);
}

}  // namespace

void Put(JsonObject& o, const char* key, const std::string& v) { o.SetString(key, v); }
void Put(JsonObject& o, const char* key, int64_t v) { o.SetInt(key, v); }
void Put(JsonObject& o, const char* key, double v) { o.SetNumber(key, v); }
void Put(JsonObject& o, const char* key, bool v) { o.SetBool(key, v); }
void Put(JsonObject& o, const char* key, const std::vector<std::string>& v) {
  o.Set(key, JsonValue::StringArray(v));
}
void Put(JsonObject& o, const char* key, const std::vector<int64_t>& v) {
  o.Set(key, JsonValue::IntArray(v));
}

void Get(const JsonObject& o, const char* key, std::string* v) {
  if (std::optional<std::string> s = o.GetString(key)) *v = std::move(*s);
}

void Get(const JsonObject& o, const char* key, int64_t* v) {
  const std::optional<double> n = o.GetNumber(key);
  // A number out of int64's range would be undefined behaviour to convert.
  if (n && *n > -9e18 && *n < 9e18) *v = static_cast<int64_t>(*n);
}

void Get(const JsonObject& o, const char* key, double* v) {
  if (const std::optional<double> n = o.GetNumber(key)) *v = *n;
}

void Get(const JsonObject& o, const char* key, bool* v) {
  const JsonValue* value = o.Find(key);
  if (value != nullptr && value->type() == JsonValue::Type::kBool) *v = value->bool_value();
}

void Get(const JsonObject& o, const char* key, std::vector<std::string>* v) {
  GetArray(o, key, v);
}

void Get(const JsonObject& o, const char* key, std::vector<int64_t>* v) { GetArray(o, key, v); }

}  // namespace mitra::records::detail
