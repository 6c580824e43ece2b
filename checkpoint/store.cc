#include "checkpoint/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "checkpoint/crc32c.h"
#include "checkpoint/torch_zip.h"

namespace mitra::checkpoint {
namespace fs = std::filesystem;

namespace {

Status ErrnoStatus(const std::string& what, const std::string& path) {
  return Status::IoError(what + " " + path + ": " + std::strerror(errno));
}

Status SyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status::Ok() : ErrnoStatus("cannot fsync", path);
}

// "step-120" -> 120; -1 for anything else (including "step-120.partial").
int64_t StepOf(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5) return -1;
  const std::string digits = name.substr(5);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 15) return -1;
  return std::stoll(digits);
}

}  // namespace

std::string StepDirectory(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("step-" + std::to_string(step))).string();
}

std::string PartialDirectory(const std::string& dir, int64_t step) {
  return StepDirectory(dir, step) + ".partial";
}

Status WriteFileDurably(const std::string& path, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create", path);
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = ErrnoStatus("cannot write", path);
      ::close(fd);
      return s;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status s = ErrnoStatus("cannot fsync", path);
    ::close(fd);
    return s;
  }
  return ::close(fd) == 0 ? Status::Ok() : ErrnoStatus("cannot close", path);
}

namespace {

// Reads the whole file into `out` (any container of char with resize/data), sized from fstat.
template <typename Bytes>
Status ReadInto(const std::string& path, Bytes* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT ? Status::NotFound(path + " is missing")
                           : ErrnoStatus("cannot open", path);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = ErrnoStatus("cannot stat", path);
    ::close(fd);
    return s;
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    const ssize_t n = ::read(fd, out->data() + done, out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = ErrnoStatus("cannot read", path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;  // shrank while reading: the size check will say so
    done += static_cast<size_t>(n);
  }
  out->resize(done);
  ::close(fd);
  return Status::Ok();
}

}  // namespace

Result<std::string> ReadWholeFile(const std::string& path) {
  std::string out;
  if (Status s = ReadInto(path, &out); !s.ok()) return s;
  return out;
}

Result<std::vector<char>> ReadFileBytes(const std::string& path) {
  std::vector<char> out;
  if (Status s = ReadInto(path, &out); !s.ok()) return s;
  return out;
}

Status CheckFile(const std::string& path, const FileEntry& entry, std::string_view bytes) {
  if (bytes.size() != entry.bytes) {
    return Status::IoError(path + " holds " + std::to_string(bytes.size()) +
                           " bytes but the manifest says " + std::to_string(entry.bytes) +
                           " (truncated or overwritten)");
  }
  if (Crc32c(bytes) != entry.crc32c) {
    return Status::IoError(path + " does not match its checksum (the file is corrupt)");
  }
  return Status::Ok();
}

Status CheckWritable(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return Status::InvalidArgument("checkpoint directory " + dir + " cannot be created (" +
                                   ec.message() + "): choose another --checkpoint-dir");
  }
  const std::string probe = (fs::path(dir) / ".mitra-write-probe").string();
  Status s = WriteFileDurably(probe, "probe");
  ::unlink(probe.c_str());
  if (!s.ok()) {
    return Status::InvalidArgument("checkpoint directory " + dir + " is not writable (" +
                                   s.message() + "): fix its permissions or free space, or "
                                   "choose another --checkpoint-dir");
  }
  return Status::Ok();
}

Status Commit(const std::string& dir, const Manifest& manifest) {
  const std::string partial = PartialDirectory(dir, manifest.step);
  const std::string final_dir = StepDirectory(dir, manifest.step);
  if (Status s = WriteFileDurably((fs::path(partial) / kManifestName).string(),
                                  manifest.Serialize());
      !s.ok()) {
    return s;
  }
  if (Status s = SyncPath(partial, O_RDONLY | O_DIRECTORY); !s.ok()) return s;
  std::error_code ec;
  fs::remove_all(final_dir, ec);  // a stale directory of the same step from an earlier life
  if (::rename(partial.c_str(), final_dir.c_str()) != 0) {
    return ErrnoStatus("cannot rename " + partial + " to", final_dir);
  }
  return SyncPath(dir, O_RDONLY | O_DIRECTORY);
}

std::vector<int64_t> ListSteps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int64_t step = StepOf(entry.path().filename().string());
    if (step >= 0 && entry.is_directory()) steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

Result<Manifest> VerifyFiles(const std::string& path, const std::vector<std::string>& only) {
  const std::string manifest_path = (fs::path(path) / kManifestName).string();
  auto text = ReadWholeFile(manifest_path);
  if (!text.ok()) return text.status();
  auto manifest = Manifest::Parse(*text, manifest_path);
  if (!manifest.ok()) return manifest.status();
  if (only.size() == 1 && only[0].empty()) return manifest;
  for (const auto& name : only) {
    if (!manifest->FindFile(name)) {
      return Status::IoError(manifest_path + " does not list " + name +
                             " (the checkpoint is incomplete)");
    }
  }
  for (const auto& f : manifest->files) {
    if (!only.empty() && std::find(only.begin(), only.end(), f.name) == only.end()) continue;
    // Streams the file through a fixed buffer: a segment's file may be large.
    const std::string file = (fs::path(path) / f.name).string();
    Status s = ReadTensorFile(file, f.bytes, f.crc32c, f.tensors,
                              [](const TensorRecord&) -> void* { return nullptr; });
    if (!s.ok()) return Status::IoError(s.message());
  }
  return manifest;
}

Result<Manifest> Verify(const std::string& path) { return VerifyFiles(path, {}); }

Result<Found> FindNewestValid(const std::string& dir, std::vector<std::string>* skipped) {
  for (int64_t step : ListSteps(dir)) {
    const std::string path = StepDirectory(dir, step);
    auto manifest = Verify(path);
    if (manifest.ok()) return Found{step, path, std::move(*manifest)};
    if (skipped) {
      skipped->push_back("checkpoint step " + std::to_string(step) + " is not usable: " +
                         manifest.status().message());
    }
  }
  return Status::NotFound("no complete checkpoint in " + dir);
}

Status Prune(const std::string& dir, int keep) {
  if (keep < 1) return Status::Ok();
  const auto steps = ListSteps(dir);
  std::error_code ec;
  for (size_t i = static_cast<size_t>(keep); i < steps.size(); ++i) {
    fs::remove_all(StepDirectory(dir, steps[i]), ec);
    if (ec) return Status::IoError("cannot remove old checkpoint " + StepDirectory(dir, steps[i]) +
                                   ": " + ec.message());
  }
  if (steps.empty()) return Status::Ok();
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t dot = name.find(".partial");
    if (dot == std::string::npos || dot + 8 != name.size()) continue;
    const int64_t step = StepOf(name.substr(0, dot));
    if (step >= 0 && step < steps.front()) fs::remove_all(entry.path(), ec);
  }
  return Status::Ok();
}

}  // namespace mitra::checkpoint
