// FaultyFileSystem: a FileSystem that passes every call to another one and makes one chosen
// call go wrong, so a test can cut an operation short at each of its steps in turn.
//
// The calls that change the disk are counted from 0: CreateDirectories, WriteFileAtomically,
// OpenForAppend and NewWritableFile, each Append to such a file, a WritableFile's Close (its
// fsync), Rename, SyncDirectory and RemoveAll. The call numbered `fault_at` goes wrong in one
// of two ways:
//   kFail   it returns IoError and changes nothing; the calls after it go through (a full
//           disk, a refused rename).
//   kCrash  it and every later call return IoError and change nothing: the process died there,
//           with no handler run (SIGKILL). What the disk holds is what the calls before it left
//           (less what a WritableFile still held in its own buffer).
// A crash of the process, not of the machine: what was written but not synced is still there
// afterwards. Reads (Exists, IsDirectory, OwnershipOf, ReadFile, ListDirectory) always go
// through, so the code under test behaves as it does on the real disk up to the fault.
//
// changes() counts the changing calls made so far: run an operation once with no fault to learn
// how many steps it has; log() says what each was ("rename a to b"). Thread-safe when the
// wrapped FileSystem is.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/file_system.h"

namespace mitra::testing {

class FaultyFileSystem : public FileSystem {
 public:
  enum class Fault { kFail, kCrash };
  static constexpr int kNever = -1;

  // `base` must outlive this. `fault_at` kNever: every call goes through.
  explicit FaultyFileSystem(FileSystem& base, int fault_at = kNever, Fault fault = Fault::kFail)
      : base_(base), fault_at_(fault_at), fault_(fault) {}

  int changes() const { return changes_.load(); }
  // The changing calls made so far, in order: "create directory d", "append to f", ...
  std::vector<std::string> log() const {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  // Whether the faulty call has been made.
  bool faulted() const { return fault_at_ != kNever && changes_.load() > fault_at_; }

  bool Exists(const std::string& path) override { return base_.Exists(path); }
  bool IsDirectory(const std::string& path) override { return base_.IsDirectory(path); }
  Result<std::string> ReadFile(const std::string& path) override { return base_.ReadFile(path); }
  Result<Ownership> OwnershipOf(const std::string& path) override {
    return base_.OwnershipOf(path);
  }
  Result<std::vector<std::string>> ListDirectory(const std::string& path) override {
    return base_.ListDirectory(path);
  }

  Status CreateDirectories(const std::string& path) override {
    if (Status s = Change("create directory " + path); !s.ok()) return s;
    return base_.CreateDirectories(path);
  }
  Status WriteFileAtomically(const std::string& path, std::string_view contents) override {
    if (Status s = Change("write " + path); !s.ok()) return s;
    return base_.WriteFileAtomically(path, contents);
  }
  Result<std::unique_ptr<AppendableFile>> OpenForAppend(const std::string& path) override {
    if (Status s = Change("open " + path); !s.ok()) return s;
    Result<std::unique_ptr<AppendableFile>> file = base_.OpenForAppend(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<AppendableFile>(new File(this, path, std::move(*file)));
  }
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool direct) override {
    if (Status s = Change("create " + path); !s.ok()) return s;
    Result<std::unique_ptr<WritableFile>> file = base_.NewWritableFile(path, direct);
    if (!file.ok()) return file.status();
    return std::unique_ptr<WritableFile>(new Writable(this, path, std::move(*file)));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (Status s = Change("rename " + from + " to " + to); !s.ok()) return s;
    return base_.Rename(from, to);
  }
  Status SyncDirectory(const std::string& path) override {
    if (Status s = Change("sync " + path); !s.ok()) return s;
    return base_.SyncDirectory(path);
  }
  Status RemoveAll(const std::string& path) override {
    if (Status s = Change("remove " + path); !s.ok()) return s;
    return base_.RemoveAll(path);
  }

 private:
  // Counts one changing call; a non-OK Status when it must not happen.
  Status Change(const std::string& what) {
    const int n = changes_.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      log_.push_back(what);
    }
    if (fault_at_ == kNever || n < fault_at_) return Status::Ok();
    if (n == fault_at_) {
      return Status::IoError("cannot " + what + ": fault injected at change " + std::to_string(n));
    }
    if (fault_ == Fault::kCrash) return Status::IoError("cannot " + what + ": crashed earlier");
    return Status::Ok();
  }

  class File : public AppendableFile {
   public:
    File(FaultyFileSystem* fs, std::string path, std::unique_ptr<AppendableFile> base)
        : fs_(fs), path_(std::move(path)), base_(std::move(base)) {}
    Status Append(std::string_view data) override {
      if (Status s = fs_->Change("append to " + path_); !s.ok()) return s;
      return base_->Append(data);
    }

   private:
    FaultyFileSystem* fs_;
    std::string path_;
    std::unique_ptr<AppendableFile> base_;
  };

  // A file being written: each Append and the Close are changes of their own.
  class Writable : public WritableFile {
   public:
    Writable(FaultyFileSystem* fs, std::string path, std::unique_ptr<WritableFile> base)
        : fs_(fs), path_(std::move(path)), base_(std::move(base)) {}
    Status Append(const void* data, size_t size) override {
      if (Status s = fs_->Change("append to " + path_); !s.ok()) return s;
      return base_->Append(data, size);
    }
    Status Close() override {
      if (Status s = fs_->Change("sync and close " + path_); !s.ok()) return s;
      return base_->Close();
    }
    uint64_t size() const override { return base_->size(); }

   private:
    FaultyFileSystem* fs_;
    std::string path_;
    std::unique_ptr<WritableFile> base_;
  };

  FileSystem& base_;
  const int fault_at_;
  const Fault fault_;
  std::atomic<int> changes_{0};
  mutable std::mutex mu_;
  std::vector<std::string> log_;  // guarded by mu_
};

}  // namespace mitra::testing
