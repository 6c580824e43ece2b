#include "worker/report.h"

#include <cstdio>

namespace mitra::worker {

Record::Record(const std::string& event) { object_.SetString("event", event); }

Record& Record::Add(const std::string& key, int64_t value) {
  object_.SetInt(key, value);
  return *this;
}

Record& Record::Add(const std::string& key, double value) {
  object_.SetNumber(key, value);
  return *this;
}

Record& Record::Add(const std::string& key, bool value) {
  object_.SetBool(key, value);
  return *this;
}

Record& Record::Add(const std::string& key, const std::string& value) {
  object_.SetString(key, value);
  return *this;
}

Record& Record::AddJson(const std::string& key, std::string json) {
  object_.Set(key, JsonValue::Raw(std::move(json)));
  return *this;
}

void Record::Emit() {
  const std::string out = "@mitra " + object_.ToJson() + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

}  // namespace mitra::worker
