#include "checkpoint/torch_zip.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "checkpoint/crc32.h"
#include "checkpoint/crc32c.h"
#include "common/direct_file.h"
#include "common/file_system.h"
#include "checkpoint/torch_pickle.h"

namespace mitra::checkpoint {
namespace {

constexpr const char* kArchive = "archive/";
constexpr uint64_t kAlignment = 64;            // tensor data starts at a multiple of this
constexpr size_t kChunk = size_t{8} << 20;     // tensor data is checksummed in pieces of this size
constexpr uint64_t kLargeRecord = uint64_t{1} << 20;  // its data starts at a page
constexpr uint16_t kFlags = 0x0808;  // sizes and CRC in a data descriptor; UTF-8 names
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01: fixed, so files are reproducible

std::string ErrnoText() { return std::strerror(errno); }

// Appends the low `bytes` (at most 8) bytes of `v`, little-endian.
void Le(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) *out += static_cast<char>((v >> (8 * i)) & 0xff);
}


}  // namespace

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "f32";
    case DType::kFloat64: return "f64";
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
    case DType::kInt64: return "i64";
    case DType::kInt32: return "i32";
    case DType::kUInt8: return "u8";
    case DType::kBool: return "bool";
  }
  return "?";
}

std::optional<DType> ParseDType(std::string_view name) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                  DType::kInt64, DType::kInt32, DType::kUInt8, DType::kBool}) {
    if (DTypeName(d) == name) return d;
  }
  return std::nullopt;
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: case DType::kInt64: return 8;
    case DType::kFloat32: case DType::kInt32: return 4;
    case DType::kFloat16: case DType::kBFloat16: return 2;
    case DType::kUInt8: case DType::kBool: return 1;
  }
  return 1;
}

int64_t TensorRecord::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorRecord::ShapeString() const {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

bool operator==(const TensorRecord& a, const TensorRecord& b) {
  return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.offset == b.offset;
}

std::optional<std::vector<int64_t>> ParseShape(std::string_view text) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return std::nullopt;
  text = text.substr(1, text.size() - 2);
  std::vector<int64_t> shape;
  // The element count, zero dimensions left out, stays under 2^53 (8 PiB of doubles), so that
  // numel() and bytes() of any parsed shape are computed without overflow.
  constexpr int64_t kMaxElements = int64_t{1} << 53;
  int64_t elements = 1;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view dim = text.substr(0, comma);
    if (dim.empty() || dim.size() > 15 || dim.find_first_not_of("0123456789") != std::string_view::npos) {
      return std::nullopt;
    }
    shape.push_back(std::stoll(std::string(dim)));
    if (shape.back() > 0) {
      if (shape.back() > kMaxElements / elements) return std::nullopt;
      elements *= shape.back();
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) return std::nullopt;  // a trailing comma
  }
  return shape;
}

// ---- writing ------------------------------------------------------------------------------

struct TorchZipWriter::Entry {
  std::string name;  // the record's path in the zip
  uint64_t header_offset = 0;
  uint64_t size = 0;
  uint32_t crc32 = 0;
  bool zip64 = false;
};

TorchZipWriter::TorchZipWriter(std::unique_ptr<WritableFile> file, TorchZipOptions options)
    : file_(std::move(file)), options_(options) {}

TorchZipWriter::~TorchZipWriter() = default;

Result<std::unique_ptr<TorchZipWriter>> TorchZipWriter::Create(FileSystem& fs,
                                                               const std::string& path,
                                                               TorchZipOptions options) {
  auto file = fs.NewWritableFile(path, options.direct);
  if (!file.ok()) return file.status();
  return std::unique_ptr<TorchZipWriter>(new TorchZipWriter(std::move(*file), options));
}

Result<std::unique_ptr<TorchZipWriter>> TorchZipWriter::Create(const std::string& path,
                                                               TorchZipOptions options) {
  PosixFileSystem fs;
  return Create(fs, path, options);
}

Status TorchZipWriter::Append(const void* data, size_t size) {
  if (!failed_.ok()) return failed_;
  crc32c_ = Crc32c(data, size, crc32c_);
  if (Status s = file_->Append(data, size); !s.ok()) return failed_ = s;
  return Status::Ok();
}

Status TorchZipWriter::WriteRecord(const std::string& record, const void* data, uint64_t size) {
  if (!failed_.ok()) return failed_;
  Entry e;
  e.name = kArchive + record;
  e.header_offset = file_->size();
  e.size = size;
  e.zip64 = size >= options_.zip64_threshold || e.header_offset >= options_.zip64_threshold;
  std::string extra;
  if (e.zip64) {  // the sizes come in the data descriptor, 8 bytes each
    Le(&extra, 0x0001, 2);
    Le(&extra, 16, 2);
    Le(&extra, 0, 8);
    Le(&extra, 0, 8);
  }
  // Pad with an extra field (as torch.save does) so the data starts 64-byte aligned, and a
  // large record's data at a page, where it can go to the disk straight from memory.
  const uint64_t alignment = size >= kLargeRecord ? DirectFile::kAlignment : kAlignment;
  const uint64_t unpadded = e.header_offset + 30 + e.name.size() + extra.size() + 4;
  const uint64_t pad = (alignment - unpadded % alignment) % alignment;
  Le(&extra, 0x4246, 2);  // "FB"
  Le(&extra, pad, 2);
  extra.append(pad, 'Z');

  std::string header;
  Le(&header, 0x04034b50, 4);
  Le(&header, e.zip64 ? 45 : 20, 2);  // version needed
  Le(&header, kFlags, 2);
  Le(&header, 0, 2);  // stored
  Le(&header, 0, 2);  // time
  Le(&header, kDosDate, 2);
  Le(&header, 0, 4);  // CRC-32 and sizes: in the data descriptor
  Le(&header, 0, 8);
  Le(&header, e.name.size(), 2);
  Le(&header, extra.size(), 2);
  header += e.name;
  header += extra;
  if (Status s = Append(header.data(), header.size()); !s.ok()) return s;

  // The data in pieces, each checksummed while it is in cache and then written (straight
  // from the caller's memory where it is aligned: see DirectFile).
  const char* p = static_cast<const char*>(data);
  for (uint64_t done = 0; done < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size - done));
    e.crc32 = Crc32(p + done, n, e.crc32);
    if (Status s = Append(p + done, n); !s.ok()) return s;
    done += n;
  }
  std::string descriptor;
  Le(&descriptor, 0x08074b50, 4);
  Le(&descriptor, e.crc32, 4);
  Le(&descriptor, size, e.zip64 ? 8 : 4);  // compressed
  Le(&descriptor, size, e.zip64 ? 8 : 4);  // uncompressed
  entries_.push_back(std::move(e));
  return Append(descriptor.data(), descriptor.size());
}

Status TorchZipWriter::Add(const std::string& name, DType dtype,
                           const std::vector<int64_t>& shape, const void* data) {
  if (name.empty() || name.find_first_of(" \t\r\n") != std::string::npos) {
    return Status::InvalidArgument("tensor name '" + name + "' is empty or holds whitespace");
  }
  for (const TensorRecord& t : tensors_) {
    if (t.name == name) return Status::InvalidArgument("tensor '" + name + "' is added twice");
  }
  for (int64_t d : shape) {
    if (d < 0) return Status::InvalidArgument("tensor '" + name + "' has a negative dimension");
  }
  TensorRecord t{name, dtype, shape, 0};
  const std::string key = std::to_string(tensors_.size());
  if (Status s = WriteRecord("data/" + key, data, t.bytes()); !s.ok()) return s;
  // The data ends where the descriptor (just appended) begins.
  t.offset = file_->size() - (entries_.back().zip64 ? 24 : 16) - t.bytes();
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

Result<WrittenFile> TorchZipWriter::Finish() {
  std::vector<std::string> keys;
  for (size_t i = 0; i < tensors_.size(); ++i) keys.push_back(std::to_string(i));
  const std::string pickle = detail::PickleTensorDict(tensors_, keys, options_.nest_separator);
  if (Status s = WriteRecord("data.pkl", pickle.data(), pickle.size()); !s.ok()) return s;
  if (Status s = WriteRecord("version", "3\n", 2); !s.ok()) return s;

  const uint64_t directory_offset = file_->size();
  bool zip64 = entries_.size() >= 0xFFFF;
  std::string dir;
  for (const Entry& e : entries_) {
    std::string extra;
    if (e.zip64) {
      Le(&extra, 0x0001, 2);
      Le(&extra, 24, 2);
      Le(&extra, e.size, 8);
      Le(&extra, e.size, 8);
      Le(&extra, e.header_offset, 8);
      zip64 = true;
    }
    const uint64_t small = e.zip64 ? 0xFFFFFFFFull : 0;
    Le(&dir, 0x02014b50, 4);
    Le(&dir, 45, 2);  // made by: zip 4.5, MS-DOS attributes
    Le(&dir, e.zip64 ? 45 : 20, 2);
    Le(&dir, kFlags, 2);
    Le(&dir, 0, 2);
    Le(&dir, 0, 2);
    Le(&dir, kDosDate, 2);
    Le(&dir, e.crc32, 4);
    Le(&dir, e.zip64 ? small : e.size, 4);
    Le(&dir, e.zip64 ? small : e.size, 4);
    Le(&dir, e.name.size(), 2);
    Le(&dir, extra.size(), 2);
    Le(&dir, 0, 2);  // comment length
    Le(&dir, 0, 8);  // disk, internal and external attributes
    Le(&dir, e.zip64 ? small : e.header_offset, 4);
    dir += e.name;
    dir += extra;
  }
  const uint64_t dir_size = dir.size();
  zip64 = zip64 || directory_offset >= options_.zip64_threshold || dir_size >= options_.zip64_threshold;
  if (zip64) {
    const uint64_t record_offset = directory_offset + dir_size;
    Le(&dir, 0x06064b50, 4);
    Le(&dir, 44, 8);
    Le(&dir, 45, 2);
    Le(&dir, 45, 2);
    Le(&dir, 0, 8);  // this disk, the directory's disk
    Le(&dir, entries_.size(), 8);
    Le(&dir, entries_.size(), 8);
    Le(&dir, dir_size, 8);
    Le(&dir, directory_offset, 8);
    Le(&dir, 0x07064b50, 4);
    Le(&dir, 0, 4);
    Le(&dir, record_offset, 8);
    Le(&dir, 1, 4);
  }
  Le(&dir, 0x06054b50, 4);
  Le(&dir, 0, 4);
  Le(&dir, zip64 ? 0xFFFF : entries_.size(), 2);
  Le(&dir, zip64 ? 0xFFFF : entries_.size(), 2);
  Le(&dir, zip64 ? 0xFFFFFFFFull : dir_size, 4);
  Le(&dir, zip64 ? 0xFFFFFFFFull : directory_offset, 4);
  Le(&dir, 0, 2);
  if (Status s = Append(dir.data(), dir.size()); !s.ok()) return s;
  if (Status s = file_->Close(); !s.ok()) return failed_ = s;
  return WrittenFile{file_->size(), crc32c_, tensors_};
}

// ---- reading ------------------------------------------------------------------------------

namespace {

class Reader {
 public:
  Reader(int fd, const std::string& path) : fd_(fd), path_(path) {}

  // Reads [offset_, offset_ + size) into `into` (scratch when null), extending the CRC-32C.
  Status Read(uint64_t size, char* into) {
    while (size > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(size, kChunk));
      char* dest = into;
      if (!dest) {
        scratch_.resize(std::max(scratch_.size(), n));
        dest = scratch_.data();
      }
      for (size_t got = 0; got < n;) {
        const ssize_t r = ::pread(fd_, dest + got, n - got, static_cast<off_t>(offset_ + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return Status::IoError("cannot read " + path_ + ": " + ErrnoText());
        if (r == 0) return Status::IoError(path_ + " ends early (truncated or overwritten)");
        got += static_cast<size_t>(r);
      }
      crc_ = Crc32c(dest, n, crc_);
      offset_ += n;
      size -= n;
      if (into) into += n;
    }
    return Status::Ok();
  }
  uint64_t offset() const { return offset_; }
  uint32_t crc() const { return crc_; }

 private:
  int fd_;
  const std::string& path_;
  uint64_t offset_ = 0;
  uint32_t crc_ = 0;
  std::vector<char> scratch_;
};

}  // namespace

Status ReadTensorFile(const std::string& path, uint64_t size, uint32_t crc32c,
                      const std::vector<TensorRecord>& tensors,
                      const TensorDestination& destination) {
  // Only the regular file mitra wrote: not through a link, and a FIFO is refused, not waited on.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    return errno == ENOENT ? Status::NotFound(path + " is missing")
                           : Status::IoError(ErrnoStatus("cannot open", path, errno).message());
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (Status regular = CheckRegularFile(fd, path); !regular.ok()) return regular;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::IoError("cannot stat " + path + ": " + ErrnoText());
  if (static_cast<uint64_t>(st.st_size) != size) {
    return Status::IoError(path + " holds " + std::to_string(st.st_size) +
                           " bytes but the manifest says " + std::to_string(size) +
                           " (truncated or overwritten)");
  }
  std::vector<const TensorRecord*> order;
  for (const TensorRecord& t : tensors) order.push_back(&t);
  // By offset, and an empty tensor before one that starts where it lies: the result must not
  // depend on how the sort orders ties.
  std::sort(order.begin(), order.end(), [](const TensorRecord* a, const TensorRecord* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->bytes() < b->bytes();
  });
  Reader reader(fd, path);
  for (const TensorRecord* t : order) {
    // offset + bytes() could wrap around for a damaged manifest's offset.
    if (t->offset < reader.offset() || t->bytes() > size || t->offset > size - t->bytes()) {
      return Status::IoError(path + ": the manifest places tensor '" + t->name +
                             "' outside the file or over another (the checkpoint is damaged)");
    }
    if (Status s = reader.Read(t->offset - reader.offset(), nullptr); !s.ok()) return s;
    if (Status s = reader.Read(t->bytes(), static_cast<char*>(destination(*t))); !s.ok()) return s;
  }
  if (Status s = reader.Read(size - reader.offset(), nullptr); !s.ok()) return s;
  if (reader.crc() != crc32c) {
    return Status::IoError(path + " does not match its checksum (the file is corrupt)");
  }
  return Status::Ok();
}

}  // namespace mitra::checkpoint
