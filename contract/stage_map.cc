#include "mitra/contract/stage_map.h"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <utility>

namespace mitra::contract {

namespace {

std::vector<std::vector<int>> DefaultLayout(int num_stages, int num_replicas) {
  std::vector<std::vector<int>> ranks(num_stages);
  for (int s = 0; s < num_stages; ++s) {
    for (int d = 0; d < num_replicas; ++d) ranks[s].push_back(s + num_stages * d);
  }
  return ranks;
}

std::string VarunaText(const std::vector<std::vector<int>>& ranks) {
  std::string text;
  for (const auto& stage : ranks) {
    for (size_t d = 0; d < stage.size(); ++d) text += (d ? "," : "") + std::to_string(stage[d]);
    text += ';';
  }
  return text;
}

// "PxD": the default layout of P stages and D replicas; nullopt for anything else.
std::optional<std::pair<int, int>> ParseCompact(const std::string& text) {
  const size_t x = text.find('x');
  if (x == std::string::npos) return std::nullopt;
  auto whole = [](const std::string& digits) -> std::optional<int> {
    if (digits.empty() || digits.size() > 6) return std::nullopt;
    for (char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
    }
    const int n = std::stoi(digits);
    return n >= 1 ? std::optional<int>(n) : std::nullopt;
  };
  const std::optional<int> stages = whole(text.substr(0, x));
  const std::optional<int> replicas = whole(text.substr(x + 1));
  if (!stages || !replicas) return std::nullopt;
  return std::make_pair(*stages, *replicas);
}

}  // namespace

StageMap StageMap::Default(int num_stages, int num_replicas) {
  std::vector<std::vector<int>> ranks = DefaultLayout(num_stages, num_replicas);
  std::string text = VarunaText(ranks);
  // Linux caps one environment string at 128 KiB; a large job's map says "PxD" instead.
  if (text.size() > kLongestListedText) {
    text = std::to_string(num_stages) + "x" + std::to_string(num_replicas);
  }
  return StageMap(std::move(ranks), std::move(text));
}

Result<StageMap> StageMap::Parse(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("stage-to-rank map '" + text + "': " + why +
                                   " (expected e.g. \"0,2;1,3;\": the ranks of each stage, "
                                   "stages separated by ';', or \"2x3\": 2 stages x 3 "
                                   "replicas in the default layout)");
  };
  if (text.find('x') != std::string::npos) {
    const std::optional<std::pair<int, int>> shape = ParseCompact(text);
    if (!shape) return bad("'PxD' needs two whole numbers >= 1");
    if (static_cast<int64_t>(shape->first) * shape->second > 999999) {
      return bad("more than 999999 ranks");
    }
    return StageMap(DefaultLayout(shape->first, shape->second), text);
  }
  std::vector<std::vector<int>> ranks;
  std::vector<int> stage;
  std::string number;
  auto flush_number = [&]() -> bool {
    if (number.empty() || number.size() > 6) return false;
    stage.push_back(std::stoi(number));
    number.clear();
    return true;
  };
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      number += c;
    } else if (c == ',') {
      if (!flush_number()) return bad("a rank is missing before ','");
    } else if (c == ';') {
      if (!flush_number()) return bad("a rank is missing before ';'");
      ranks.push_back(std::move(stage));
      stage.clear();
    } else if (c != ' ') {
      return bad(std::string("unexpected character '") + c + "'");
    }
  }
  if (!number.empty()) {  // the trailing ';' is optional
    flush_number();
    ranks.push_back(std::move(stage));
  } else if (!stage.empty()) {
    return bad("it ends with ','");
  }
  if (ranks.empty()) return bad("it names no stage");
  const size_t replicas = ranks[0].size();
  std::vector<bool> seen(ranks.size() * replicas, false);
  for (size_t s = 0; s < ranks.size(); ++s) {
    if (ranks[s].size() != replicas) {
      return bad("stage " + std::to_string(s) + " has " + std::to_string(ranks[s].size()) +
                 " ranks but stage 0 has " + std::to_string(replicas) +
                 ": every stage needs the same number");
    }
    for (int r : ranks[s]) {
      if (r >= static_cast<int>(seen.size())) {
        return bad("rank " + std::to_string(r) + " is outside 0.." +
                   std::to_string(seen.size() - 1));
      }
      if (seen[r]) return bad("rank " + std::to_string(r) + " appears twice");
      seen[r] = true;
    }
  }
  return StageMap(std::move(ranks));
}

StageMap::StageMap(std::vector<std::vector<int>> ranks) : StageMap(ranks, VarunaText(ranks)) {}

StageMap::StageMap(std::vector<std::vector<int>> ranks, std::string text) {
  auto data = std::make_shared<Data>();
  data->text = std::move(text);
  data->ranks = std::move(ranks);
  data_ = std::move(data);
}

GridPosition StageMap::PositionOf(int rank) const {
  for (int s = 0; s < num_stages(); ++s) {
    for (int d = 0; d < num_replicas(); ++d) {
      if (ranks()[s][d] == rank) return {s, d};
    }
  }
  throw std::out_of_range("rank " + std::to_string(rank) + " is not in the stage-to-rank map " +
                          ToString());
}

}  // namespace mitra::contract
