// StoreTable: the rendezvous store's keys and values and the waits on them, what each request
// does to them (c10d's Store semantics), without sockets or clocks. The server
// (store_server.h) owns one on its thread and sends the answers it returns.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "rendezvous/wire.h"

namespace mitra::rendezvous {

class StoreTable {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // An answer for client `client` (the server's connection id).
  struct Answer {
    uint64_t client;
    Response response;
  };

  // `max_bytes`: keys and values held at most; a request that would hold more is answered
  // with an error and changes nothing.
  explicit StoreTable(size_t max_bytes) : max_bytes_(max_bytes) {}

  // What `request` of `client` does: the client's answer, and the answers of the waits it
  // completes (a key it creates was the last one they lacked). A wait for keys that are not
  // all there yet is held, nothing returned for it, until a later request completes it or
  // ExpireWaits passes `wait_deadline` (TimePoint::max(): never). A client has one request
  // at a time: it sends the next once answered.
  std::vector<Answer> Handle(uint64_t client, const Request& request, TimePoint wait_deadline);
  // kTimedOut answers for the held waits whose deadline is at or before `now`.
  std::vector<Answer> ExpireWaits(TimePoint now);
  // Drops `client`'s held wait, if any (its connection closed).
  void Forget(uint64_t client);

  bool Waiting(uint64_t client) const { return waits_.count(client) > 0; }
  // The earliest deadline of a held wait; TimePoint::max() when none.
  TimePoint NextDeadline() const;
  size_t bytes() const { return bytes_; }

 private:
  struct Wait {
    std::vector<std::string> missing;  // the keys it still lacks
    TimePoint deadline;
  };

  Response Apply(uint64_t client, const Request& r, TimePoint wait_deadline,
                 std::vector<Answer>& completed);
  // Sets `key`; false (nothing changed) past the byte cap. A key created completes the waits
  // that lacked only it, whose answers go to `completed`.
  bool Put(const std::string& key, std::string value, std::vector<Answer>& completed);
  void Unlist(uint64_t client, const Wait& wait);

  size_t max_bytes_;
  size_t bytes_ = 0;
  std::unordered_map<std::string, std::string> values_;
  std::map<uint64_t, Wait> waits_;                                     // by client
  std::unordered_map<std::string, std::vector<uint64_t>> waiting_on_;  // key -> clients
};

}  // namespace mitra::rendezvous
