// Filled<S>(): a struct of the json_fields pattern (common/json_fields.h) with every member set
// to a value that differs from its default and from every other member's, so a round trip that
// does not write or read back a field shows it as a difference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/json_fields.h"

namespace mitra::testing {

struct Filler {
  int n = 0;
  void operator()(const char*, std::string& v) { v = "s" + std::to_string(++n); }
  void operator()(const char*, int64_t& v) { v = 1000 + ++n; }
  void operator()(const char*, double& v) { v = 0.5 + ++n; }
  void operator()(const char*, bool& v) { v = true; }
  void operator()(const char*, std::vector<std::string>& v) { v = {"a" + std::to_string(++n), "b"}; }
  void operator()(const char*, std::vector<int64_t>& v) { v = {++n, 0, 7}; }
  void operator()(const char*, fields::RawJson& v) { v.text = R"({"n":)" + std::to_string(++n) + "}"; }
  template <class T>
  void operator()(const char* key, std::optional<T>& v) {
    T value{};
    (*this)(key, value);
    v = value;
  }
};

template <class Struct>
Struct Filled() {
  Struct s;
  Filler fill;
  Struct::Fields(s, fill);
  return s;
}

}  // namespace mitra::testing
