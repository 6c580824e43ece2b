// The median of a set of measurements: the middle one, or the mean of the two middle ones for
// an even count; 0 for none.
#pragma once

#include <algorithm>
#include <vector>

namespace mitra {

// Reorders `values` (a caller's scratch buffer: no allocation).
inline double MedianInPlace(std::vector<double>& values) {
  if (values.empty()) return 0;
  const size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + middle, values.end());
  double median = values[middle];
  if (values.size() % 2 == 0) {
    median = (median + *std::max_element(values.begin(), values.begin() + middle)) / 2;
  }
  return median;
}

inline double Median(std::vector<double> values) { return MedianInPlace(values); }

}  // namespace mitra
