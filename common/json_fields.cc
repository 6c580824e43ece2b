#include "common/json_fields.h"

#include <nlohmann/json.hpp>

namespace mitra::fields::detail {
namespace {

// Arrays are kept as raw JSON text by JsonObject (common/json.h).
template <class T>
bool GetArray(const JsonObject& o, const char* key, std::vector<T>* v) {
  const JsonValue* value = o.Find(key);
  if (value == nullptr || value->type() != JsonValue::Type::kRaw) return false;
  const nlohmann::json array =
      nlohmann::json::parse(value->string_value(), nullptr, /*allow_exceptions=*/false);
  if (!array.is_array()) return false;
  std::vector<T> out;
  for (const nlohmann::json& item : array) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (!item.is_string()) return false;
      out.push_back(item.get<std::string>());
    } else {
      if (!item.is_number_integer()) return false;
      out.push_back(item.get<int64_t>());
    }
  }
  *v = std::move(out);
  return true;
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
void Put(JsonObject& o, const char* key, const RawJson& v) {
  if (!v.text.empty()) o.Set(key, JsonValue::Raw(v.text));  // none read: none written
}

bool Get(const JsonObject& o, const char* key, std::string* v) {
  std::optional<std::string> s = o.GetString(key);
  if (s) *v = std::move(*s);
  return s.has_value();
}

bool Get(const JsonObject& o, const char* key, int64_t* v) {
  const std::optional<double> n = o.GetNumber(key);
  // A number out of int64's range would be undefined behaviour to convert.
  if (!n || !(*n > -9e18 && *n < 9e18)) return false;
  *v = static_cast<int64_t>(*n);
  return true;
}

bool Get(const JsonObject& o, const char* key, double* v) {
  const std::optional<double> n = o.GetNumber(key);
  if (n) *v = *n;
  return n.has_value();
}

bool Get(const JsonObject& o, const char* key, bool* v) {
  const JsonValue* value = o.Find(key);
  if (value == nullptr || value->type() != JsonValue::Type::kBool) return false;
  *v = value->bool_value();
  return true;
}

bool Get(const JsonObject& o, const char* key, std::vector<std::string>* v) {
  return GetArray(o, key, v);
}

bool Get(const JsonObject& o, const char* key, std::vector<int64_t>* v) {
  return GetArray(o, key, v);
}

bool Get(const JsonObject& o, const char* key, RawJson* v) {
  const JsonValue* value = o.Find(key);
  if (value == nullptr || value->type() != JsonValue::Type::kRaw) return false;
  v->text = value->string_value();
  return true;
}

}  // namespace mitra::fields::detail
