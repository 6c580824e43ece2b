// JSON for the manager's records: one-line objects of scalar values.
//
// The manager reads the `@mitra {...}` lines workers print and writes events.jsonl,
// metrics.jsonl and state.json. All of these are flat objects of strings, numbers, booleans and
// nulls, so that is what JsonObject models. Nested arrays and objects are accepted by the
// parser and kept as raw JSON text (compact, so a record passes through with the same values),
// and can be written the same way (JsonValue::Raw, IntArray, StringArray). Reading and quoting
// are nlohmann::json's; this is only the record model on top.
//
// Values are plain data: copyable, not synchronized (one thread at a time per object).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mitra/common/status.h"

namespace mitra {

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kRaw };

  JsonValue() = default;  // null
  static JsonValue Bool(bool value);
  static JsonValue Number(double value);  // NaN and infinities become null (JSON has none)
  static JsonValue Int(int64_t value);
  static JsonValue String(std::string value);
  static JsonValue IntArray(const std::vector<int64_t>& values);
  static JsonValue StringArray(const std::vector<std::string>& values);
  // `json` must be one valid JSON value; it is written as is.
  static JsonValue Raw(std::string json);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool bool_value() const { return type_ == Type::kBool && bool_; }
  double number_value() const { return type_ == Type::kNumber ? number_ : 0.0; }
  // The string of a kString, the JSON text of a kRaw, "" otherwise.
  const std::string& string_value() const { return text_; }

  std::string ToJson() const;

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string text_;  // kString: the string; kNumber: the literal; kRaw: the JSON text
};

class JsonObject {
 public:
  using Field = std::pair<std::string, JsonValue>;

  // Sets `key`; an existing key keeps its position and takes the new value.
  JsonObject& Set(std::string key, JsonValue value);
  JsonObject& SetString(std::string key, std::string value) {
    return Set(std::move(key), JsonValue::String(std::move(value)));
  }
  JsonObject& SetInt(std::string key, int64_t value) {
    return Set(std::move(key), JsonValue::Int(value));
  }
  JsonObject& SetNumber(std::string key, double value) {
    return Set(std::move(key), JsonValue::Number(value));
  }
  JsonObject& SetBool(std::string key, bool value) {
    return Set(std::move(key), JsonValue::Bool(value));
  }
  bool Erase(std::string_view key);

  const JsonValue* Find(std::string_view key) const;  // nullptr when absent
  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  std::optional<double> GetNumber(std::string_view key) const;       // only for numbers
  std::optional<std::string> GetString(std::string_view key) const;  // only for strings

  const std::vector<Field>& fields() const { return fields_; }
  size_t size() const { return fields_.size(); }

  // One line, no spaces, fields in insertion order: {"event":"step","step":3}
  std::string ToJson() const;

  // Parses one JSON object (surrounding whitespace allowed, nothing else; at most 64 levels
  // deep). A repeated key keeps its last value. Errors are InvalidArgument with the byte offset
  // and what was expected.
  static Result<JsonObject> Parse(std::string_view text);

 private:
  // Objects up to this size are searched in order; larger ones (state.json's rank -> worker
  // table at 10,000 ranks) keep an index, so building one is not quadratic.
  static constexpr size_t kIndexFrom = 16;
  void Reindex();
  std::optional<size_t> PositionOf(std::string_view key) const;

  std::vector<Field> fields_;
  std::unordered_map<std::string, size_t> index_;  // key -> position; empty when small
};

// `text` as a JSON string literal, quotes included. UTF-8 passes through unchanged; bytes that
// are not UTF-8 become U+FFFD.
std::string JsonQuote(std::string_view text);

}  // namespace mitra
