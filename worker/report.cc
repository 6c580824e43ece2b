#include "worker/report.h"

#include <cmath>
#include <cstdio>

namespace mitra::worker {
namespace {

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

Record::Record(const std::string& event) : line_("@mitra {\"event\":" + Quote(event)) {}

Record& Record::Add(const std::string& key, int64_t value) {
  line_ += "," + Quote(key) + ":" + std::to_string(value);
  return *this;
}

Record& Record::Add(const std::string& key, double value) {
  char buf[32];
  if (std::isfinite(value)) {
    std::snprintf(buf, sizeof(buf), "%.12g", value);
  } else {
    std::snprintf(buf, sizeof(buf), "null");  // JSON has no NaN
  }
  line_ += "," + Quote(key) + ":" + buf;
  return *this;
}

Record& Record::Add(const std::string& key, const std::string& value) {
  line_ += "," + Quote(key) + ":" + Quote(value);
  return *this;
}

void Record::Emit() {
  const std::string out = line_ + "}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

}  // namespace mitra::worker
