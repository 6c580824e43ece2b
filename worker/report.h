// Record: one `@mitra {...}` line on stdout, the worker's side of docs/worker-contract.md.
//
//   Record("step").Add("step", 7).Add("loss", 2.31).Emit();
//
// Emit() writes the whole line with one write and flushes, so records never interleave with
// log text mid-line. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "common/json.h"

namespace mitra::worker {

class Record {
 public:
  explicit Record(const std::string& event);
  Record& Add(const std::string& key, int64_t value);
  Record& Add(const std::string& key, int value) { return Add(key, static_cast<int64_t>(value)); }
  Record& Add(const std::string& key, double value);
  Record& Add(const std::string& key, bool value);
  Record& Add(const std::string& key, const std::string& value);
  Record& Add(const std::string& key, const char* value) { return Add(key, std::string(value)); }
  // `json`: one valid JSON value, written as it is (a nested object, say).
  Record& AddJson(const std::string& key, std::string json);
  void Emit();

 private:
  JsonObject object_;
};

}  // namespace mitra::worker
