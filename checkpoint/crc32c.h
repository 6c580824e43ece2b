// CRC-32C (Castagnoli), the checksum of every checkpoint file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mitra::checkpoint {

// Extends `crc` (0 to start) with `size` bytes at `data`. Uses the CPU's CRC-32C instruction
// where there is one.
uint32_t Crc32c(const void* data, size_t size, uint32_t crc);
inline uint32_t Crc32c(std::string_view bytes, uint32_t crc = 0) {
  return Crc32c(bytes.data(), bytes.size(), crc);
}

namespace detail {
// The table-driven version, for tests to compare against.
uint32_t Crc32cPortable(const void* data, size_t size, uint32_t crc);
}  // namespace detail

}  // namespace mitra::checkpoint
