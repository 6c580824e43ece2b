#include "common/json.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace mitra {

JsonValue JsonValue::Bool(bool value) {
  JsonValue v;
  v.type_ = Type::kBool;
  v.bool_ = value;
  return v;
}

JsonValue JsonValue::Number(double value) {
  JsonValue v;
  if (!std::isfinite(value)) return v;
  v.type_ = Type::kNumber;
  v.number_ = value;
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);  // shortest form
  v.text_ = ec == std::errc() ? std::string(buffer, end) : std::string("0");
  return v;
}

JsonValue JsonValue::Int(int64_t value) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.number_ = static_cast<double>(value);
  v.text_ = std::to_string(value);
  return v;
}

JsonValue JsonValue::String(std::string value) {
  JsonValue v;
  v.type_ = Type::kString;
  v.text_ = std::move(value);
  return v;
}

JsonValue JsonValue::IntArray(const std::vector<int64_t>& values) {
  std::string json = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) json += ',';
    json += std::to_string(values[i]);
  }
  json += ']';
  return Raw(std::move(json));
}

JsonValue JsonValue::StringArray(const std::vector<std::string>& values) {
  std::string json = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) json += ',';
    json += JsonQuote(values[i]);
  }
  json += ']';
  return Raw(std::move(json));
}

JsonValue JsonValue::Raw(std::string json) {
  JsonValue v;
  v.type_ = Type::kRaw;
  v.text_ = std::move(json);
  return v;
}

std::string JsonValue::ToJson() const {
  switch (type_) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return bool_ ? "true" : "false";
    case Type::kNumber:
      return text_;
    case Type::kString:
      return JsonQuote(text_);
    case Type::kRaw:
      return text_;
  }
  return "null";
}

JsonObject& JsonObject::Set(std::string key, JsonValue value) {
  if (const std::optional<size_t> at = PositionOf(key)) {
    fields_[*at].second = std::move(value);
    return *this;
  }
  fields_.emplace_back(std::move(key), std::move(value));
  if (!index_.empty()) {
    index_.emplace(fields_.back().first, fields_.size() - 1);
  } else if (fields_.size() > kIndexFrom) {
    Reindex();
  }
  return *this;
}

bool JsonObject::Erase(std::string_view key) {
  for (auto it = fields_.begin(); it != fields_.end(); ++it) {
    if (it->first == key) {
      fields_.erase(it);
      Reindex();
      return true;
    }
  }
  return false;
}

void JsonObject::Reindex() {
  index_.clear();
  if (fields_.size() <= kIndexFrom) return;
  for (size_t i = 0; i < fields_.size(); ++i) index_.emplace(fields_[i].first, i);
}

std::optional<size_t> JsonObject::PositionOf(std::string_view key) const {
  if (!index_.empty()) {
    const auto it = index_.find(std::string(key));
    return it == index_.end() ? std::nullopt : std::optional<size_t>(it->second);
  }
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (fields_[i].first == key) return i;
  }
  return std::nullopt;
}

const JsonValue* JsonObject::Find(std::string_view key) const {
  const std::optional<size_t> at = PositionOf(key);
  return at ? &fields_[*at].second : nullptr;
}

std::optional<double> JsonObject::GetNumber(std::string_view key) const {
  const JsonValue* v = Find(key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->number_value();
}

std::optional<std::string> JsonObject::GetString(std::string_view key) const {
  const JsonValue* v = Find(key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->string_value();
}

std::string JsonObject::ToJson() const {
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i > 0) out += ',';
    out += JsonQuote(fields_[i].first);
    out += ':';
    out += fields_[i].second.ToJson();
  }
  out += '}';
  return out;
}

namespace {

constexpr int kMaxDepth = 64;

// A parsed value as a JsonValue: scalars as themselves, arrays and objects as their JSON text.
Result<JsonValue> FromParsed(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null:
      return JsonValue();
    case nlohmann::ordered_json::value_t::boolean:
      return JsonValue::Bool(v.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return JsonValue::Int(v.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = v.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return JsonValue::Int(static_cast<int64_t>(u));
      return JsonValue::Number(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: {
      const double d = v.get<double>();
      if (!std::isfinite(d)) return Status::InvalidArgument("a number out of range");
      return JsonValue::Number(d);
    }
    case nlohmann::ordered_json::value_t::string:
      return JsonValue::String(v.get<std::string>());
    default:
      return JsonValue::Raw(v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  }
}

}  // namespace

Result<JsonObject> JsonObject::Parse(std::string_view text) {
  // Deeper nesting than any record has is refused, before it costs memory.
  const nlohmann::ordered_json::parser_callback_t limit_depth =
      [](int depth, nlohmann::ordered_json::parse_event_t, nlohmann::ordered_json&) {
        if (depth > kMaxDepth) throw std::length_error("nested deeper than 64 levels");
        return true;
      };
  nlohmann::ordered_json parsed;
  try {
    parsed = nlohmann::ordered_json::parse(text.begin(), text.end(), limit_depth);
  } catch (const nlohmann::ordered_json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 8: ...".
    std::string why = e.what();
    if (const size_t colon = why.find(": "); colon != std::string::npos) why = why.substr(colon + 2);
    return Status::InvalidArgument("not JSON at byte " + std::to_string(e.byte) + ": " + why);
  } catch (const nlohmann::ordered_json::exception& e) {  // a number out of range, ...
    std::string why = e.what();
    if (const size_t bracket = why.find("] "); bracket != std::string::npos) why = why.substr(bracket + 2);
    return Status::InvalidArgument("not JSON: " + why);
  } catch (const std::length_error& e) {
    return Status::InvalidArgument(std::string("not a record: ") + e.what());
  }
  if (!parsed.is_object()) return Status::InvalidArgument("expected a JSON object ({...})");
  JsonObject object;
  for (const auto& [key, value] : parsed.items()) {
    Result<JsonValue> v = FromParsed(value);
    if (!v.ok()) return Status::InvalidArgument("\"" + key + "\": " + v.status().message());
    object.Set(key, std::move(v).value());
  }
  return object;
}

std::string JsonQuote(std::string_view text) {
  // Invalid UTF-8 (a worker's log line may hold any bytes) becomes U+FFFD, never an exception.
  return nlohmann::ordered_json(std::string(text))
      .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace mitra
