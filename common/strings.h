// Small string helpers shared by the parsers (machine list, flags, JSON records).
//
// All functions are pure and thread-safe. Views returned point into the argument: they are valid
// only while the argument's storage is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mitra {

bool StartsWith(std::string_view text, std::string_view prefix);
bool EndsWith(std::string_view text, std::string_view suffix);

// `text` without leading and trailing spaces, tabs, '\r' and '\n'.
std::string_view Trim(std::string_view text);

// Fields separated by runs of spaces or tabs; no empty fields.
std::vector<std::string_view> SplitFields(std::string_view text);

// Lines separated by '\n' (a trailing '\r' is kept; Trim removes it). A final line without
// '\n' is included; a trailing '\n' does not produce an empty last line.
std::vector<std::string_view> SplitLines(std::string_view text);

// Decimal integer with an optional leading '-', nothing else (no spaces, no '+', no "0x").
// nullopt on anything else or on overflow.
std::optional<int64_t> ParseInt64(std::string_view text);

// A finite decimal number as strtod reads it ("1", "0.5", "1e-3"); nullopt on trailing text,
// overflow, NaN or infinity.
std::optional<double> ParseDouble(std::string_view text);

std::string Join(const std::vector<std::string>& parts, std::string_view separator);

// Whether `name` can be one part of a file name as it is, and one field of a line: non-empty,
// with no '.', '/', whitespace or control character (a segment's name, which names its
// checkpoint file "seg-<name>.pt").
bool IsPlainName(std::string_view name);

// The last `count` lines of `text` (fewer if it has fewer).
std::vector<std::string> LastLines(std::string_view text, size_t count);

}  // namespace mitra
