// Tensor files in PyTorch's zip format, written and read without LibTorch.
//
// What `torch.save` of a dict writes and `torch.load` (PyTorch 1.13 and later) reads: an
// uncompressed zip whose records are
//   archive/data.pkl     a protocol-2 pickle of {name: tensor} (nested dicts optional)
//   archive/data/<key>   each tensor's bytes, little-endian, contiguous, 64-byte aligned
//   archive/version      "3"
// (docs/checkpoint-format.md). The writer streams each tensor's bytes from the caller's memory
// to the file in large writes, computing the zip's CRC-32 and the checkpoint's CRC-32C on the
// way, and reports where every tensor's data lies in the file; the reader uses those offsets
// to read each tensor straight into its destination, checking the file's CRC-32C as it goes.
// The zip's own directory is written for other readers and never parsed here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_system.h"
#include "mitra/common/status.h"

namespace mitra::checkpoint {

enum class DType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8, kBool };

std::string_view DTypeName(DType dtype);  // "f32", "f64", "f16", "bf16", "i64", "i32", "u8", "bool"
std::optional<DType> ParseDType(std::string_view name);
size_t DTypeSize(DType dtype);

// One tensor of a file, as the manifest lists it.
struct TensorRecord {
  std::string name;  // the key in the file's dict (no whitespace)
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // empty: a 0-dim tensor
  uint64_t offset = 0;         // where its bytes start in the file

  int64_t numel() const;
  uint64_t bytes() const { return static_cast<uint64_t>(numel()) * DTypeSize(dtype); }
  std::string ShapeString() const;  // "[256,128]", "[]"
};
bool operator==(const TensorRecord& a, const TensorRecord& b);
// "[256,128]" -> {256, 128}; nullopt when malformed.
std::optional<std::vector<int64_t>> ParseShape(std::string_view text);

// What a finished file holds: its size, its CRC-32C, and its tensors in file order.
struct WrittenFile {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  std::vector<TensorRecord> tensors;
};

struct TorchZipOptions {
  // 0: the pickle is a flat {name: tensor}. '/': names are paths of nested dicts
  // ("model/embed.wte.weight" -> {"model": {"embed.wte.weight": t}}).
  char nest_separator = 0;
  // Records (or offsets) at or above this size use zip64 fields; lower only to test zip64.
  uint64_t zip64_threshold = 0xFFFFFFFFull;
  // Write around the page cache where the file system allows (common/direct_file.h);
  // false: through it, as any other file (for tests and comparisons).
  bool direct = true;
};

// Writes one file. Each Add writes its tensor at once (the caller's memory may be reused when
// it returns): a tensor of 1 MiB or more is placed at a 4096-byte boundary of the file and, when
// its memory starts at one too, goes to the disk straight from that memory (DirectFile);
// Finish writes the pickle, the zip directory, fsyncs and closes. A writer that is destroyed
// unfinished closes the file and leaves it incomplete. Not thread-safe.
class TorchZipWriter {
 public:
  // Creates `path` through `fs` (FileSystem::NewWritableFile), which must outlive the writer
  // only while Create runs.
  static Result<std::unique_ptr<TorchZipWriter>> Create(FileSystem& fs, const std::string& path,
                                                        TorchZipOptions options = {});
  // The same on the machine's file system (PosixFileSystem).
  static Result<std::unique_ptr<TorchZipWriter>> Create(const std::string& path,
                                                        TorchZipOptions options = {});
  ~TorchZipWriter();

  // `data` holds numel(shape) contiguous elements of `dtype`. Names must be unique and free of
  // whitespace. IoError names the file (a full disk reads "No space left on device").
  Status Add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
             const void* data);
  Result<WrittenFile> Finish();

 private:
  struct Entry;
  TorchZipWriter(std::unique_ptr<WritableFile> file, TorchZipOptions options);
  Status WriteRecord(const std::string& record, const void* data, uint64_t size);
  Status Append(const void* data, size_t size);  // extends the CRC-32C

  std::unique_ptr<WritableFile> file_;
  TorchZipOptions options_;
  std::vector<Entry> entries_;
  std::vector<TensorRecord> tensors_;
  uint32_t crc32c_ = 0;  // of the bytes appended so far
  Status failed_;
};

// Reads the tensors of the file at `path`, whose manifest entry says it holds `size` bytes with
// CRC-32C `crc32c` and lists `tensors`. For each tensor `destination` returns where its
// record.bytes() bytes go, or nullptr to skip it. Every byte of the file is read once and the
// CRC-32C checked over all of them; when it does not match (or the size differs) the error
// names the file, and the destinations hold unspecified bytes.
using TensorDestination = std::function<void*(const TensorRecord& record)>;
Status ReadTensorFile(const std::string& path, uint64_t size, uint32_t crc32c,
                      const std::vector<TensorRecord>& tensors,
                      const TensorDestination& destination);

}  // namespace mitra::checkpoint
