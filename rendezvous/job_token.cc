#include "rendezvous/job_token.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace mitra::rendezvous {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Bytes32 RandomBytes32() {
  Bytes32 bytes;
  size_t filled = 0;
  while (filled < bytes.size()) {
    const ssize_t n = ::getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("getrandom failed: ") + std::strerror(errno));
    filled += static_cast<size_t>(n);
  }
  return bytes;
}

JobToken JobToken::Generate() { return JobToken(RandomBytes32()); }

Result<JobToken> JobToken::Parse(std::string_view hex) {
  Bytes32 key;
  if (hex.size() != 2 * key.size()) {
    return Status::InvalidArgument("a job token is 64 hex digits; this one has " +
                                   std::to_string(hex.size()) + " characters");
  }
  for (size_t i = 0; i < key.size(); ++i) {
    const int high = HexDigit(hex[2 * i]), low = HexDigit(hex[2 * i + 1]);
    if (high < 0 || low < 0) {
      return Status::InvalidArgument("a job token is 64 hex digits; this one has other characters");
    }
    key[i] = static_cast<uint8_t>(high * 16 + low);
  }
  return JobToken(key);
}

std::string JobToken::Hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : key_) {
    hex += kDigits[b >> 4];
    hex += kDigits[b & 15];
  }
  return hex;
}

Bytes32 Hmac(const Bytes32& key, std::initializer_list<std::string_view> parts) {
  std::string message;
  for (std::string_view part : parts) message.append(part);
  Bytes32 tag;
  unsigned int length = 0;
  if (::HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
             reinterpret_cast<const unsigned char*>(message.data()), message.size(), tag.data(),
             &length) == nullptr ||
      length != tag.size()) {
    throw std::runtime_error("HMAC-SHA-256 failed (OpenSSL)");
  }
  return tag;
}

bool SameTag(const Bytes32& a, const Bytes32& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string_view AsText(const Bytes32& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

Bytes32 Bytes32From(std::string_view text) {
  Bytes32 bytes{};
  std::memcpy(bytes.data(), text.data(), std::min(text.size(), bytes.size()));
  return bytes;
}

}  // namespace mitra::rendezvous
