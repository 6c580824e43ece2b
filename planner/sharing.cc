#include "planner/sharing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "common/median.h"

namespace mitra::planner {
namespace {

std::string Figure(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", x);
  return text;
}

}  // namespace

double SharedSpeed(const std::vector<std::vector<double>>& rounds, double alone_rate) {
  std::vector<double> figures;
  for (const std::vector<double>& rates : rounds) {
    if (rates.empty() || alone_rate <= 0) continue;
    const double mean = std::accumulate(rates.begin(), rates.end(), 0.0) / rates.size();
    figures.push_back(mean / alone_rate);
  }
  return Median(figures);
}

std::string ImpossibleSharing(double speed, int k, int cores, double fewer) {
  const double slack = 1 + kSharingTolerance;
  if (!(speed > 0)) return "no process made progress";
  if (speed > slack) return "each process faster than one alone (" + Figure(speed) + ")";
  if (k > 1 && speed > fewer * slack) {
    return "each process faster (" + Figure(speed) + ") than with " + std::to_string(k - 1) +
           " computing (" + Figure(fewer) + ")";
  }
  if (cores > 0 && k * speed > cores * slack) {
    return std::to_string(k) + " processes at " + Figure(speed) + " each do " +
           Figure(k * speed) + " processes' work at once on " + std::to_string(cores) +
           (cores == 1 ? " CPU" : " CPUs");
  }
  return "";
}

double BoundedSharing(int k, int cores, double fewer) {
  double bound = std::min(1.0, fewer);
  if (cores > 0) bound = std::min(bound, static_cast<double>(cores) / k);
  return bound;
}

std::vector<double> CalibratedSharing(const std::vector<double>& speeds, double measured,
                                      int cores) {
  if (speeds.size() < 2 || !(measured > 0) || !(speeds.back() > 0)) return speeds;
  const double factor = measured / speeds.back();
  const double last = static_cast<double>(speeds.size() - 1);
  std::vector<double> calibrated{speeds.front()};
  for (size_t i = 1; i < speeds.size(); ++i) {
    const int k = static_cast<int>(i) + 1;
    const double moved = speeds[i] * std::pow(factor, static_cast<double>(i) / last);
    calibrated.push_back(std::min(moved, BoundedSharing(k, cores, calibrated.back())));
  }
  return calibrated;
}

}  // namespace mitra::planner
