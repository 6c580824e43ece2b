// DirectFile, the machine's WritableFile: what it writes around the page cache, or through it,
// is exactly what was appended.
#include "common/direct_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/file_system.h"

namespace mitra {
namespace {
namespace fs = std::filesystem;

// Whatever the alignment of the caller's memory and of the pieces, and whether or not the
// page cache is bypassed, the file holds exactly the bytes appended.
TEST(DirectFile, HoldsExactlyTheBytesAppendedInEitherMode) {
  const std::string dir = fs::temp_directory_path() / ("mitra-direct-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  constexpr size_t kA = DirectFile::kAlignment;
  char* raw = static_cast<char*>(std::aligned_alloc(kA, 12 * kA + (5 << 20)));
  std::unique_ptr<char, decltype(&std::free)> memory(raw, &std::free);
  for (size_t i = 0; i < 12 * kA + (5 << 20); ++i) raw[i] = static_cast<char>(i * 7 + i / 4093);
  // (offset into memory, size): aligned and not, whole blocks and not, one larger than the
  // file's buffer.
  const std::vector<std::pair<size_t, size_t>> pieces = {
      {0, 100}, {kA, 3 * kA}, {kA, kA - 100}, {3, 2 * kA + 5}, {4 * kA, 2 * kA},
      {5 * kA, (5 << 20) + 17}, {8, 1}, {6 * kA, kA}};
  for (bool direct : {true, false}) {
    const std::string path = dir + "/f" + std::to_string(direct);
    auto file = DirectFile::Create(path, direct);
    ASSERT_TRUE(file.ok()) << file.status().message();
    if (!direct) {
      EXPECT_FALSE((*file)->direct());
    }
    std::string expected;
    for (const auto& [at, size] : pieces) {
      ASSERT_TRUE((*file)->Append(raw + at, size).ok());
      expected.append(raw + at, size);
    }
    EXPECT_EQ((*file)->size(), expected.size());
    ASSERT_TRUE((*file)->Close().ok());
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(std::string(std::istreambuf_iterator<char>(in), {}) == expected) << direct;
  }
  fs::remove_all(dir);
}

// The machine's file system hands out the same files.
TEST(DirectFile, IsWhatThePosixFileSystemWritesThrough) {
  const std::string dir =
      fs::temp_directory_path() / ("mitra-direct-fs-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  PosixFileSystem disk;
  auto file = disk.NewWritableFile(dir + "/f", /*direct=*/true);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_NE(dynamic_cast<DirectFile*>(file->get()), nullptr);
  ASSERT_TRUE((*file)->Append("abc", 3).ok());
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(*disk.ReadFile(dir + "/f"), "abc");
  EXPECT_FALSE(disk.NewWritableFile(dir + "/missing/f", true).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mitra
