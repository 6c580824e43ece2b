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

// A parsed object writes one line that parses again to the same fields, in the same order.
inline void CheckJsonRoundTrip(const JsonObject& object) {
  const std::string text = object.ToJson();
  FUZZ_CHECK(text.find('\n') == std::string::npos);
  Result<JsonObject> again = JsonObject::Parse(text);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->size() == object.size());
  for (size_t i = 0; i < object.size(); ++i) {
    const auto& [key, value] = object.fields()[i];
    const auto& [again_key, again_value] = again->fields()[i];
    FUZZ_CHECK(again_key == key);
    FUZZ_CHECK(again_value.type() == value.type());
    // Numbers by value: a literal such as -0e300 may be written back in another form.
    if (value.is_number()) {
      FUZZ_CHECK(again_value.number_value() == value.number_value());
    } else {
      FUZZ_CHECK(again_value.ToJson() == value.ToJson());
    }
  }
}

}  // namespace mitra::fuzz
