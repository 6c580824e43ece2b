#include "rendezvous/store_table.h"

#include <algorithm>
#include <stdexcept>

namespace mitra::rendezvous {

std::vector<StoreTable::Answer> StoreTable::Handle(uint64_t client, const Request& request,
                                                   TimePoint wait_deadline) {
  std::vector<Answer> answers;
  const Response response = Apply(client, request, wait_deadline, answers);
  if (!Waiting(client)) answers.insert(answers.begin(), {client, response});
  return answers;
}

Response StoreTable::Apply(uint64_t client, const Request& r, TimePoint wait_deadline,
                           std::vector<Answer>& completed) {
  const Response full{Reply::kError, 0,
                      "the rendezvous store is full (" + std::to_string(max_bytes_) +
                          " bytes of keys and values)"};
  const std::string& key = r.keys.empty() ? std::string() : r.keys[0];
  const auto found = values_.find(key);
  const bool exists = found != values_.end();
  switch (r.op) {
    case Op::kSet:
      return Put(key, r.value, completed) ? Response{Reply::kOk, 0, {}} : full;
    case Op::kGet:
      return exists ? Response{Reply::kValue, 0, found->second} : Response{Reply::kNotFound, 0, {}};
    case Op::kAdd: {
      int64_t sum = r.number;
      if (exists) {
        try {
          sum += std::stoll(found->second);
        } catch (const std::exception&) {
          return {Reply::kError, 0,
                  "add to '" + key.substr(0, 200) + "', which holds a value that is not a number"};
        }
      }
      return Put(key, std::to_string(sum), completed) ? Response{Reply::kNumber, sum, {}} : full;
    }
    case Op::kCompareSet: {
      // c10d's: a missing key is set when "" was expected; the answer is the value it has then
      // (for a missing key not set, the value expected).
      const bool matches = exists ? found->second == r.expected : r.expected.empty();
      if (!matches) return {Reply::kValue, 0, exists ? found->second : r.expected};
      return Put(key, r.value, completed) ? Response{Reply::kValue, 0, r.value} : full;
    }
    case Op::kDelete:
      if (!exists) return {Reply::kNumber, 0, {}};
      bytes_ -= found->first.size() + found->second.size();
      values_.erase(found);
      return {Reply::kNumber, 1, {}};
    case Op::kCheck: {
      const bool all = std::all_of(r.keys.begin(), r.keys.end(),
                                   [&](const std::string& k) { return values_.count(k) > 0; });
      return {Reply::kNumber, all ? 1 : 0, {}};
    }
    case Op::kNumKeys:
      return {Reply::kNumber, static_cast<int64_t>(values_.size()), {}};
    case Op::kWait: {
      Wait wait{{}, wait_deadline};
      for (const std::string& k : r.keys) {
        const bool listed =
            std::find(wait.missing.begin(), wait.missing.end(), k) != wait.missing.end();
        if (!values_.count(k) && !listed) wait.missing.push_back(k);
      }
      if (wait.missing.empty()) return {Reply::kOk, 0, {}};
      for (const std::string& k : wait.missing) waiting_on_[k].push_back(client);
      waits_[client] = std::move(wait);
      return {};  // held: answered when completed or expired
    }
  }
  return {Reply::kError, 0, "unknown request"};
}

bool StoreTable::Put(const std::string& key, std::string value, std::vector<Answer>& completed) {
  const auto it = values_.find(key);
  const size_t old = it == values_.end() ? 0 : key.size() + it->second.size();
  const size_t now = key.size() + value.size();
  if (bytes_ - old + now > max_bytes_) return false;
  bytes_ = bytes_ - old + now;
  if (it != values_.end()) {
    it->second = std::move(value);
    return true;
  }
  values_.emplace(key, std::move(value));
  const auto waiting = waiting_on_.find(key);
  if (waiting == waiting_on_.end()) return true;
  const std::vector<uint64_t> clients = std::move(waiting->second);
  waiting_on_.erase(waiting);
  for (uint64_t client : clients) {
    const auto w = waits_.find(client);
    if (w == waits_.end()) continue;
    std::vector<std::string>& missing = w->second.missing;
    missing.erase(std::remove(missing.begin(), missing.end(), key), missing.end());
    if (!missing.empty()) continue;
    waits_.erase(w);
    completed.push_back({client, {Reply::kOk, 0, {}}});
  }
  return true;
}

std::vector<StoreTable::Answer> StoreTable::ExpireWaits(TimePoint now) {
  std::vector<Answer> expired;
  for (auto it = waits_.begin(); it != waits_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    Unlist(it->first, it->second);
    expired.push_back({it->first, {Reply::kTimedOut, 0, {}}});
    it = waits_.erase(it);
  }
  return expired;
}

void StoreTable::Forget(uint64_t client) {
  const auto it = waits_.find(client);
  if (it == waits_.end()) return;
  Unlist(client, it->second);
  waits_.erase(it);
}

void StoreTable::Unlist(uint64_t client, const Wait& wait) {
  for (const std::string& key : wait.missing) {
    const auto it = waiting_on_.find(key);
    if (it == waiting_on_.end()) continue;
    std::vector<uint64_t>& clients = it->second;
    clients.erase(std::remove(clients.begin(), clients.end(), client), clients.end());
    if (clients.empty()) waiting_on_.erase(it);
  }
}

StoreTable::TimePoint StoreTable::NextDeadline() const {
  TimePoint next = TimePoint::max();
  for (const auto& [client, wait] : waits_) next = std::min(next, wait.deadline);
  return next;
}

}  // namespace mitra::rendezvous
