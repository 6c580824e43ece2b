// MemoryFileSystem: a FileSystem fake for unit tests. Files live in a map; a test can read
// what was written, and make writes fail to see how the code copes. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "common/file_system.h"

namespace mitra::testing {

class MemoryFileSystem : public FileSystem {
 public:
  // While true, every write (append, atomic write, directory creation) fails with IoError.
  void set_fail_writes(bool fail) {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->fail_writes = fail;
  }
  // The contents of `path`, or "" when there is no such file.
  std::string Contents(const std::string& path) const {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->files.find(path);
    return it == state_->files.end() ? "" : it->second;
  }
  void AddFile(const std::string& path, const std::string& contents) {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->files[path] = contents;
  }

  bool Exists(const std::string& path) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->files.count(path) > 0 || state_->dirs.count(path) > 0;
  }
  bool IsDirectory(const std::string& path) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->dirs.count(path) > 0;
  }
  Status CreateDirectories(const std::string& path) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->fail_writes) return Status::IoError("cannot create directory " + path);
    for (size_t pos = 1; pos <= path.size(); ++pos) {
      if (pos == path.size() || path[pos] == '/') state_->dirs.insert(path.substr(0, pos));
    }
    return Status::Ok();
  }
  Result<std::string> ReadFile(const std::string& path) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->files.find(path);
    if (it == state_->files.end()) return Status::NotFound("cannot open " + path);
    return it->second;
  }
  Status WriteFileAtomically(const std::string& path, std::string_view contents) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->fail_writes) return Status::IoError("cannot write " + path);
    state_->files[path] = std::string(contents);
    return Status::Ok();
  }
  Result<std::unique_ptr<AppendableFile>> OpenForAppend(const std::string& path) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->fail_writes) return Status::IoError("cannot open " + path);
    state_->files[path];  // create
    return std::unique_ptr<AppendableFile>(new File(state_, path));
  }

 private:
  struct State {
    std::mutex mu;
    bool fail_writes = false;
    std::map<std::string, std::string> files;
    std::set<std::string> dirs;
  };

  class File : public AppendableFile {
   public:
    File(std::shared_ptr<State> state, std::string path)
        : state_(std::move(state)), path_(std::move(path)) {}
    Status Append(std::string_view data) override {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->fail_writes) return Status::IoError("cannot write " + path_);
      state_->files[path_].append(data);
      return Status::Ok();
    }

   private:
    std::shared_ptr<State> state_;
    std::string path_;
  };

  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace mitra::testing
