// What the fuzz targets share: an invariant check that stops the process (so libFuzzer and the
// corpus replay both report the input), and the JSON round trip every JSON target asserts.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/json.h"

// Aborts with the condition's text when it does not hold. Unlike assert(), never compiled out.
#define FUZZ_CHECK(condition)                                                      \
  do {                                                                             \
    if (!(condition)) ::mitra::fuzz::Fail(#condition, __FILE__, __LINE__);          \
  } while (0)

namespace mitra::fuzz {

[[noreturn]] inline void Fail(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: invariant failed: %s\n", file, line, condition);
  std::abort();
}

// The same fields in the same order, numbers by value: a literal such as -0e300 may be written
// back in another form.
inline bool SameFields(const JsonObject& a, const JsonObject& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& [a_key, a_value] = a.fields()[i];
    const auto& [b_key, b_value] = b.fields()[i];
    if (a_key != b_key || a_value.type() != b_value.type()) return false;
    if (a_value.is_number() ? a_value.number_value() != b_value.number_value()
                            : a_value.ToJson() != b_value.ToJson()) {
      return false;
    }
  }
  return true;
}

// A parsed object writes one line that parses again to the same fields, in the same order.
inline void CheckJsonRoundTrip(const JsonObject& object) {
  const std::string text = object.ToJson();
  FUZZ_CHECK(text.find('\n') == std::string::npos);
  Result<JsonObject> again = JsonObject::Parse(text);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(SameFields(*again, object));
}

}  // namespace mitra::fuzz
