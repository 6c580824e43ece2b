// Structs whose JSON fields are named once: the pattern of the run directory's records
// (records/records.h) and of the workers' messages (contract/worker_messages.h).
//
// A struct lists its fields in a static Fields():
//
//   struct Ready {
//     int64_t generation = 0;
//     double rendezvous_s = 0;
//     template <class Self, class F>
//     static void Fields(Self& r, F&& f) {
//       f("generation", r.generation), f("rendezvous_s", r.rendezvous_s);
//     }
//   };
//
// and ToJson() writes it, FromJson() reads it, FieldNames() lists the names, all through
// Fields(). So a field renamed there is renamed for the writer and every reader at once, and a
// member renamed fails to compile where it is used. Members are strings, int64_t, doubles,
// bools, vectors of strings or of int64_t, RawJson, or optionals of these.
//
// Reading is lenient, as it must be for files a crash may have cut, an older mitra wrote or a
// program of the user's printed: a missing field or one of another type keeps the member's
// default (an optional stays empty).
//
// Plain functions of values; no synchronization.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/json.h"

namespace mitra::fields {

// A field whose value is an array or an object, kept as its JSON text; "" (none read) is not
// written.
struct RawJson {
  std::string text;
};

namespace detail {
void Put(JsonObject& o, const char* key, const std::string& v);
void Put(JsonObject& o, const char* key, int64_t v);
void Put(JsonObject& o, const char* key, double v);
void Put(JsonObject& o, const char* key, bool v);
void Put(JsonObject& o, const char* key, const std::vector<std::string>& v);
void Put(JsonObject& o, const char* key, const std::vector<int64_t>& v);
void Put(JsonObject& o, const char* key, const RawJson& v);
template <class T>
void Put(JsonObject& o, const char* key, const std::optional<T>& v) {
  if (v) Put(o, key, *v);
}
// Each Get sets `*v` and returns true when `key` holds a value of its type; else leaves it.
bool Get(const JsonObject& o, const char* key, std::string* v);
bool Get(const JsonObject& o, const char* key, int64_t* v);
bool Get(const JsonObject& o, const char* key, double* v);
bool Get(const JsonObject& o, const char* key, bool* v);
bool Get(const JsonObject& o, const char* key, std::vector<std::string>* v);
bool Get(const JsonObject& o, const char* key, std::vector<int64_t>* v);
bool Get(const JsonObject& o, const char* key, RawJson* v);
template <class T>
bool Get(const JsonObject& o, const char* key, std::optional<T>* v) {
  T value{};
  if (!Get(o, key, &value)) return false;  // absent, null or another type: stays empty
  *v = std::move(value);
  return true;
}
}  // namespace detail

// Writes the struct's fields over `o`, in Fields() order (optionals only when set); fields of
// `o` that the struct does not name stay.
template <class Struct>
JsonObject& SetFields(JsonObject& o, const Struct& r) {
  Struct::Fields(r, [&o](const char* key, const auto& value) { detail::Put(o, key, value); });
  return o;
}

// The struct's fields, in Fields() order (optionals only when set).
template <class Struct>
JsonObject ToJson(const Struct& r) {
  JsonObject o;
  return SetFields(o, r);
}

template <class Struct>
Struct FromJson(const JsonObject& o) {
  Struct r;
  Struct::Fields(r, [&o](const char* key, auto& value) { detail::Get(o, key, &value); });
  return r;
}

// Every JSON field name of a struct, in Fields() order (schema tests and docs use them).
template <class Struct>
std::vector<std::string> FieldNames() {
  std::vector<std::string> names;
  Struct r;
  Struct::Fields(r, [&names](const char* key, auto&) { names.emplace_back(key); });
  return names;
}

}  // namespace mitra::fields
