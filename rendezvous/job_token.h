// The job's secret (docs/security.md): 32 random bytes the manager makes once per job and
// hands each worker in its environment (MITRA_JOB_TOKEN, 64 hex digits), never on a command
// line. Every connection to the job's rendezvous store proves it knows the token without
// sending it (wire.h), so a process of another job, or of another user on the network,
// can neither read nor write the store.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "mitra/common/status.h"

namespace mitra::rendezvous {

// 32 bytes: an HMAC-SHA-256 tag, a nonce, a key.
using Bytes32 = std::array<uint8_t, 32>;

class JobToken {
 public:
  // A new token from the kernel's random source (getrandom(2)). Throws std::runtime_error only
  // when the kernel has none to give, which Linux never does once booted.
  static JobToken Generate();
  // The token `hex` spells (as Hex() writes it). InvalidArgument when it is not 64 hex digits;
  // the message never quotes the text, which may be a secret mistyped.
  static Result<JobToken> Parse(std::string_view hex);

  std::string Hex() const;
  const Bytes32& key() const { return key_; }

 private:
  explicit JobToken(const Bytes32& key) : key_(key) {}
  Bytes32 key_;
};

// Random bytes from the kernel (getrandom(2)); throws std::runtime_error if it has none.
Bytes32 RandomBytes32();

// HMAC-SHA-256 of the concatenation of `parts` under `key`.
Bytes32 Hmac(const Bytes32& key, std::initializer_list<std::string_view> parts);

// Compares two tags in time independent of where they differ.
bool SameTag(const Bytes32& a, const Bytes32& b);

std::string_view AsText(const Bytes32& bytes);
// The first 32 bytes of `text` (zeros where it is shorter).
Bytes32 Bytes32From(std::string_view text);

}  // namespace mitra::rendezvous
