#include "planner/sharing.h"

#include <algorithm>
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

}  // namespace mitra::planner
