// MemoryFileSystem: a FileSystem fake for unit tests. Files live in a map; a test can read
// what was written, and make writes fail to see how the code copes. Paths are compared as
// written: use one spelling per file. Syncs do nothing (everything is as durable as the map).
// Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

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
  // Everything in memory is this user's alone.
  Result<Ownership> OwnershipOf(const std::string& path) override {
    if (!Exists(path)) return Status::NotFound("cannot stat " + path);
    return Ownership{};
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
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool /*direct*/) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->fail_writes) return Status::IoError("cannot create " + path);
    state_->files[path].clear();  // create or truncate
    return std::unique_ptr<WritableFile>(new Writable(state_, path));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->fail_writes) return Status::IoError("cannot rename " + from);
    auto file = state_->files.find(from);
    if (file != state_->files.end()) {
      state_->files[to] = std::move(file->second);
      state_->files.erase(file);
      return Status::Ok();
    }
    if (state_->dirs.count(from) == 0) return Status::NotFound("cannot rename " + from);
    // A directory: move it and everything under it.
    const std::string prefix = from + "/";
    Rekey(&state_->files, prefix, to + "/");
    std::set<std::string> dirs;
    for (const std::string& d : state_->dirs) {
      if (d == from) dirs.insert(to);
      else if (d.compare(0, prefix.size(), prefix) == 0) dirs.insert(to + "/" + d.substr(prefix.size()));
      else dirs.insert(d);
    }
    state_->dirs = std::move(dirs);
    return Status::Ok();
  }
  Status SyncDirectory(const std::string& path) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->dirs.count(path) == 0) return Status::NotFound("cannot open " + path);
    return Status::Ok();
  }
  Result<std::vector<std::string>> ListDirectory(const std::string& path) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->dirs.count(path) == 0) return Status::NotFound("cannot list " + path);
    const std::string prefix = path + "/";
    std::set<std::string> names;
    auto add = [&](const std::string& p) {
      if (p.compare(0, prefix.size(), prefix) != 0) return;
      const std::string rest = p.substr(prefix.size());
      names.insert(rest.substr(0, rest.find('/')));
    };
    for (const auto& [file, contents] : state_->files) add(file);
    for (const std::string& d : state_->dirs) add(d);
    names.erase("");
    return std::vector<std::string>(names.begin(), names.end());
  }
  Status RemoveAll(const std::string& path) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->fail_writes) return Status::IoError("cannot remove " + path);
    const std::string prefix = path + "/";
    auto under = [&](const std::string& p) {
      return p == path || p.compare(0, prefix.size(), prefix) == 0;
    };
    for (auto it = state_->files.begin(); it != state_->files.end();) {
      it = under(it->first) ? state_->files.erase(it) : std::next(it);
    }
    for (auto it = state_->dirs.begin(); it != state_->dirs.end();) {
      it = under(*it) ? state_->dirs.erase(it) : std::next(it);
    }
    return Status::Ok();
  }

 private:
  struct State {
    std::mutex mu;
    bool fail_writes = false;
    std::map<std::string, std::string> files;
    std::set<std::string> dirs;
  };

  // Moves the entries of `map` whose keys start with `from` to keys starting with `to`.
  static void Rekey(std::map<std::string, std::string>* map, const std::string& from,
                    const std::string& to) {
    std::map<std::string, std::string> moved;
    for (auto it = map->begin(); it != map->end();) {
      if (it->first.compare(0, from.size(), from) != 0) {
        ++it;
        continue;
      }
      moved[to + it->first.substr(from.size())] = std::move(it->second);
      it = map->erase(it);
    }
    map->insert(moved.begin(), moved.end());
  }

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

  class Writable : public WritableFile {
   public:
    Writable(std::shared_ptr<State> state, std::string path)
        : state_(std::move(state)), path_(std::move(path)) {}
    Status Append(const void* data, size_t size) override {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->fail_writes) return Status::IoError("cannot write " + path_);
      state_->files[path_].append(static_cast<const char*>(data), size);
      size_ += size;
      return Status::Ok();
    }
    Status Close() override {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->fail_writes) return Status::IoError("cannot sync " + path_);
      return Status::Ok();
    }
    uint64_t size() const override { return size_; }

   private:
    std::shared_ptr<State> state_;
    std::string path_;
    uint64_t size_ = 0;
  };

  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace mitra::testing
