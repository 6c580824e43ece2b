#include "common/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "common/json_reader.h"

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
  for (Field& field : fields_) {
    if (field.first == key) {
      field.second = std::move(value);
      return *this;
    }
  }
  fields_.emplace_back(std::move(key), std::move(value));
  return *this;
}

bool JsonObject::Erase(std::string_view key) {
  for (auto it = fields_.begin(); it != fields_.end(); ++it) {
    if (it->first == key) {
      fields_.erase(it);
      return true;
    }
  }
  return false;
}

const JsonValue* JsonObject::Find(std::string_view key) const {
  for (const Field& field : fields_) {
    if (field.first == key) return &field.second;
  }
  return nullptr;
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

Result<JsonObject> JsonObject::Parse(std::string_view text) { return detail::ReadJsonObject(text); }

std::string JsonQuote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned>(c));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace mitra
