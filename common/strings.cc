#include "common/strings.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace mitra {

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string_view Trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  const size_t end = text.find_last_not_of(kSpace);
  return text.substr(begin, end - begin + 1);
}

std::vector<std::string_view> SplitFields(std::string_view text) {
  std::vector<std::string_view> fields;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t begin = text.find_first_not_of(" \t", pos);
    if (begin == std::string_view::npos) break;
    size_t end = text.find_first_of(" \t", begin);
    if (end == std::string_view::npos) end = text.size();
    fields.push_back(text.substr(begin, end - begin));
    pos = end;
  }
  return fields;
}

std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

std::optional<int64_t> ParseInt64(std::string_view text) {
  if (text.empty()) return std::nullopt;
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value, 10);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::optional<double> ParseDouble(std::string_view text) {
  // strtod needs a terminated string and accepts leading spaces, "inf" and "nan": check first.
  if (text.empty() || text.size() > 64) return std::nullopt;
  const char first = text.front();
  if (!(first == '-' || first == '.' || (first >= '0' && first <= '9'))) return std::nullopt;
  if (text.find_first_of("xX") != std::string_view::npos) return std::nullopt;  // no hex floats
  const std::string copy(text);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(copy.c_str(), &end);
  if (errno != 0 || end != copy.c_str() + copy.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::string Join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

std::vector<std::string> LastLines(std::string_view text, size_t count) {
  std::vector<std::string_view> lines = SplitLines(text);
  const size_t first = lines.size() > count ? lines.size() - count : 0;
  return std::vector<std::string>(lines.begin() + first, lines.end());
}

bool IsPlainName(std::string_view name) {
  if (name.empty()) return false;
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '.' || c == '/' || u <= ' ' || u == 0x7f) return false;
  }
  return true;
}

}  // namespace mitra
