// Durations as text, one function per format the terminal, messages and records use. Pure and
// thread-safe.
#pragma once

#include <string>

namespace mitra {

// The shortest decimal text that reads back as `seconds`, no unit: "30", "0.5", "0.1". For
// values the user gave ("--timeout 30") and will type again.
std::string SecondsText(double seconds);

// "3.1 s": seconds with one decimal at most, as the terminal narrates what took how long.
std::string DurationText(double seconds);

// "0:07", "12:05", "3:02:01": whole seconds as a clock shows them (an ETA, a run's length).
// Negative durations read "0:00".
std::string ClockDuration(double seconds);

// "40 s", "2 min 5 s", "3 h 4 min": whole seconds in the two largest units, for ages and
// elapsed times in `mitra status`. Negative durations read "0 s".
std::string HumanDuration(double seconds);

// `unix_seconds` as local time in strftime's `format` ("%H:%M:%S"); "?" for a time no time_t
// holds (a damaged record's), rather than an undefined conversion.
std::string LocalTimeText(double unix_seconds, const char* format);

}  // namespace mitra
