#include "mitra/contract/stage_map.h"

#include <stdexcept>

namespace mitra::contract {

StageMap StageMap::Default(int num_stages, int num_replicas) {
  std::vector<std::vector<int>> ranks(num_stages);
  for (int s = 0; s < num_stages; ++s) {
    for (int d = 0; d < num_replicas; ++d) ranks[s].push_back(s + num_stages * d);
  }
  return StageMap(std::move(ranks));
}

Result<StageMap> StageMap::Parse(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("stage-to-rank map '" + text + "': " + why +
                                   " (expected e.g. \"0,2;1,3;\": the ranks of each stage, "
                                   "stages separated by ';')");
  };
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

StageMap::StageMap(std::vector<std::vector<int>> ranks) {
  auto data = std::make_shared<Data>();
  for (const auto& stage : ranks) {
    for (size_t d = 0; d < stage.size(); ++d) data->text += (d ? "," : "") + std::to_string(stage[d]);
    data->text += ';';
  }
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
