#include "checkpoint/crc32.h"

#include <zlib.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mitra::checkpoint {
namespace {

#if defined(__x86_64__)
__attribute__((target("sse2"))) inline __m128i Load(const unsigned char* q) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}

// One lane folded forward over `k` and combined with `next`.
__attribute__((target("pclmul"))) inline __m128i Fold(__m128i lane, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(lane, k, 0x00),
                                     _mm_clmulepi64_si128(lane, k, 0x11)),
                       next);
}

// Folding as in Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
// Instruction" (2009), for the bit-reflected polynomial 0x04C11DB7: four 128-bit lanes are
// folded 64 bytes at a time, then into one lane, then reduced to 32 bits (Barrett).
// `size` is a multiple of 16 and at least 64; `state` is the inverted CRC.
__attribute__((target("pclmul,sse4.1"))) uint32_t FoldPclmul(const unsigned char* p, size_t size,
                                                              uint32_t state) {
  // x^(4*128+32) mod P and x^(4*128-32) mod P, reflected, for folding 512 bits ...
  const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
  // ... 128 bits ...
  const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
  // ... 64 bits; then P and the Barrett constant floor(x^64 / P).
  const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
  const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
  const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);

  __m128i x1 = _mm_xor_si128(Load(p), _mm_cvtsi32_si128(static_cast<int>(state)));
  __m128i x2 = Load(p + 16), x3 = Load(p + 32), x4 = Load(p + 48);
  p += 64;
  size -= 64;
  for (; size >= 64; p += 64, size -= 64) {
    x1 = Fold(x1, k1k2, Load(p));
    x2 = Fold(x2, k1k2, Load(p + 16));
    x3 = Fold(x3, k1k2, Load(p + 32));
    x4 = Fold(x4, k1k2, Load(p + 48));
  }
  x1 = Fold(x1, k3k4, x2);
  x1 = Fold(x1, k3k4, x3);
  x1 = Fold(x1, k3k4, x4);
  for (; size >= 16; p += 16, size -= 16) x1 = Fold(x1, k3k4, Load(p));

  // 128 bits to 64, then to 32 (Barrett).
  __m128i x2b = _mm_clmulepi64_si128(x1, k3k4, 0x10);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2b);
  x2b = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), x2b);
  x2b = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
  x2b = _mm_clmulepi64_si128(_mm_and_si128(x2b, low32), poly, 0x00);
  x1 = _mm_xor_si128(x1, x2b);
  return static_cast<uint32_t>(_mm_extract_epi32(x1, 1));
}

bool HasPclmul() {
  static const bool has = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return has;
}
#endif

}  // namespace

uint32_t Crc32(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  if (size >= 64 && HasPclmul()) {
    const size_t n = size & ~size_t{15};
    crc = ~FoldPclmul(p, n, ~crc);
    p += n;
    size -= n;
  }
#endif
  return detail::Crc32Zlib(p, size, crc);
}

namespace detail {
uint32_t Crc32Zlib(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {  // zlib takes a uInt length
    const size_t n = std::min<size_t>(size, size_t{1} << 30);
    crc = static_cast<uint32_t>(::crc32(crc, p, static_cast<uInt>(n)));
    p += n;
    size -= n;
  }
  return crc;
}
}  // namespace detail

}  // namespace mitra::checkpoint
