#include "common/duration_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>

namespace mitra {

std::string SecondsText(double seconds) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), seconds);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(seconds);
}

std::string DurationText(double seconds) {
  return SecondsText(std::round(seconds * 10) / 10) + " s";
}

std::string ClockDuration(double seconds) {
  const int64_t total = std::max<int64_t>(0, std::llround(seconds));
  const int64_t h = total / 3600;
  const int64_t m = total / 60 % 60;
  const int64_t s = total % 60;
  char buffer[48];
  if (h > 0) {
    std::snprintf(buffer, sizeof(buffer), "%lld:%02lld:%02lld", static_cast<long long>(h),
                  static_cast<long long>(m), static_cast<long long>(s));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lld:%02lld", static_cast<long long>(m),
                  static_cast<long long>(s));
  }
  return buffer;
}

std::string HumanDuration(double seconds) {
  const int64_t s = seconds > 0 ? static_cast<int64_t>(std::llround(seconds)) : 0;
  if (s < 60) return std::to_string(s) + " s";
  if (s < 3600) {
    return std::to_string(s / 60) + " min" + (s % 60 ? " " + std::to_string(s % 60) + " s" : "");
  }
  const int64_t minutes = (s % 3600) / 60;
  return std::to_string(s / 3600) + " h" + (minutes ? " " + std::to_string(minutes) + " min" : "");
}

std::string LocalTimeText(double unix_seconds, const char* format) {
  if (!(std::fabs(unix_seconds) < 1e15)) return "?";
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm local{};
  if (::localtime_r(&t, &local) == nullptr) return "?";
  char buffer[64];
  if (std::strftime(buffer, sizeof(buffer), format, &local) == 0) return "?";
  return buffer;
}

}  // namespace mitra
