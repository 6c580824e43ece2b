// A checkpoint's tensor file (checkpoint/torch_zip.h): ReadTensorFile reading every tensor the
// manifest lists straight into place, from a file on a disk anything may have damaged.
//
// The reader never parses the zip: the manifest's tensor lines say where each tensor's bytes
// lie, so both are input here. The input is the manifest's lines for the file ("tensor name
// dtype [shape] offset", as FileLines writes them; other lines are skipped), an empty line,
// then the file's bytes, which are written to an in-memory file. The size and CRC-32C the reader
// checks against are the bytes' own, so that it reads them through. Tensors whose name starts
// with '_' get no destination (the reader skips them).
//
// Invariants: the read succeeds exactly when every tensor lies inside the file and each starts
// at or after the end of the one before it in the order of (offset, size); then each
// destination holds that tensor's bytes of the file, and the same read with a wrong CRC-32C
// fails.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/crc32c.h"
#include "checkpoint/manifest.h"
#include "checkpoint/torch_zip.h"
#include "fuzz/fuzz_check.h"

namespace mitra::checkpoint {
namespace {

// Whether the tensors lie inside `size` bytes, each at or after the end of the one before it
// in the order of (offset, size), computed without overflow.
bool LieApart(const std::vector<TensorRecord>& tensors, uint64_t size) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end)
  for (const TensorRecord& t : tensors) {
    const bool empty = std::count(t.shape.begin(), t.shape.end(), 0) > 0;
    unsigned __int128 bytes = empty ? 0 : DTypeSize(t.dtype);
    for (const int64_t d : t.shape) {
      if (empty) break;
      bytes *= static_cast<uint64_t>(d);
      if (bytes > size) return false;
    }
    if (t.offset > size || bytes > size - t.offset) return false;
    ranges.emplace_back(t.offset, t.offset + static_cast<uint64_t>(bytes));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return false;
  }
  return true;
}

// The file the bytes are written to, rewritten for each input: in memory where /dev/shm is, so
// that no disk slows the fuzzer down (not a memfd: its /proc/self/fd path is a link, and the
// reader follows none).
struct MemoryFile {
  std::string path = (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                     std::string("/tensor-file-fuzz-") + std::to_string(::getpid());
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

  ~MemoryFile() { ::unlink(path.c_str()); }

  void Fill(std::string_view bytes) const {
    FUZZ_CHECK(fd >= 0);
    FUZZ_CHECK(::ftruncate(fd, 0) == 0);
    FUZZ_CHECK(::pwrite(fd, bytes.data(), bytes.size(), 0) ==
               static_cast<ssize_t>(bytes.size()));
  }
};

}  // namespace
}  // namespace mitra::checkpoint

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mitra::checkpoint;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t blank = input.find("\n\n");
  if (blank == std::string_view::npos) return 0;
  const std::string_view lines = input.substr(0, blank + 1);
  const std::string_view bytes = input.substr(blank + 2);

  // The file's entry, as the manifest would list it, with the bytes' true size and checksum.
  std::vector<FileEntry> files;
  FileEntry entry;
  entry.name = "seg-fuzz.pt";
  entry.bytes = bytes.size();
  entry.crc32c = Crc32c(bytes);
  files.push_back(entry);
  for (size_t begin = 0; begin < lines.size();) {
    const size_t end = lines.find('\n', begin);
    const std::string line(lines.substr(begin, end - begin));
    begin = end + 1;
    if (line.rfind("tensor ", 0) == 0) (void)ParseFileLine(line, &files);
  }
  const std::vector<TensorRecord>& tensors = files.back().tensors;

  static const MemoryFile file;
  file.Fill(bytes);
  const std::string& path = file.path;
  std::map<const TensorRecord*, std::vector<char>> read;
  auto destination = [&](const TensorRecord& t) -> void* {
    if (!t.name.empty() && t.name[0] == '_') return nullptr;
    FUZZ_CHECK(t.offset <= bytes.size() && t.bytes() <= bytes.size() - t.offset);
    std::vector<char>& into = read[&t];
    into.assign(static_cast<size_t>(t.bytes()) + 1, '\0');  // +1: never a null data()
    return into.data();
  };
  const mitra::Status status =
      ReadTensorFile(path, entry.bytes, entry.crc32c, tensors, destination);
  FUZZ_CHECK(status.ok() == LieApart(tensors, bytes.size()));
  if (status.ok()) {
    for (const auto& [t, into] : read) {
      FUZZ_CHECK(std::memcmp(into.data(), bytes.data() + t->offset, t->bytes()) == 0);
    }
    const mitra::Status wrong =
        ReadTensorFile(path, entry.bytes, entry.crc32c ^ 1, tensors, [](const TensorRecord&) {
          return static_cast<void*>(nullptr);
        });
    FUZZ_CHECK(!wrong.ok());
  }
  return 0;
}
