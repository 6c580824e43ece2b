#include "checkpoint/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace mitra::checkpoint {
namespace {

// Slicing-by-8 tables for the reflected polynomial 0x82F63B78: ~1.5 GB/s on one core; used
// where the CPU has no CRC-32C instruction.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

uint32_t Crc32cTables(const void* data, size_t size, uint32_t crc) {
  const auto& t = GetTables().t;
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  while (size >= 8) {
    const uint32_t lo = crc ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
                               uint32_t{p[3]} << 24);
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
    p += 8;
    size -= 8;
  }
  while (size--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

#if defined(__x86_64__)
// SSE4.2's crc32 instruction computes the same polynomial at ~10 GB/s here, so checking a
// checkpoint costs little next to reading it.
__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(const void* data, size_t size,
                                                       uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  for (; size >= 8; p += 8, size -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  auto c32 = static_cast<uint32_t>(c);
  while (size--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}
#endif

using Crc32cFn = uint32_t (*)(const void*, size_t, uint32_t);

Crc32cFn Choose() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return Crc32cSse42;
#endif
  return Crc32cTables;
}

}  // namespace

uint32_t Crc32c(const void* data, size_t size, uint32_t crc) {
  static const Crc32cFn fn = Choose();
  return fn(data, size, crc);
}

namespace detail {
uint32_t Crc32cPortable(const void* data, size_t size, uint32_t crc) {
  return Crc32cTables(data, size, crc);
}
}  // namespace detail

}  // namespace mitra::checkpoint
