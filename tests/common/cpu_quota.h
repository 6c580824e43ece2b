// CpuQuota: a CPU control group whose processes together may use a fraction of the machine's
// CPUs, so that tests and benchmarks can emulate slower machines on one box (one loopback sshd
// "host" per group: everything it starts is born in the group).
//
//   MITRA_SKIP_WITHOUT(CpuQuota::UnavailableReason());   (tests/prerequisite.h)
//   Result<std::unique_ptr<CpuQuota>> slow = CpuQuota::Create("mitra-test-slow", 0.4);
//   (*slow)->Add(pid);  // the process, and every child it starts from now on
//
// cgroup v1's cpu controller (cpu.cfs_quota_us over cpu.cfs_period_us) where it is mounted, as on
// these machines; else cgroup v2's cpu.max. Needs the right to make groups (root). Not
// thread-safe; nothing blocks beyond a few file writes.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "mitra/common/status.h"

namespace mitra::testing {

class CpuQuota {
 public:
  // "" when a group can be made and limited here; otherwise why not.
  static std::string UnavailableReason();

  // A new group `name` (made unique with the process id) limited to `cpus` CPUs' time in all
  // (0.4: 40% of one CPU); IoError says which file could not be written.
  static Result<std::unique_ptr<CpuQuota>> Create(const std::string& name, double cpus);
  // Moves what is left in the group to its parent and removes the group.
  ~CpuQuota();

  CpuQuota(const CpuQuota&) = delete;
  CpuQuota& operator=(const CpuQuota&) = delete;

  // Moves process `pid` into the group; the children it starts afterwards are born there.
  Status Add(pid_t pid);

  double cpus() const { return cpus_; }
  const std::string& path() const { return path_; }

 private:
  CpuQuota(std::string root, std::string path, double cpus)
      : root_(std::move(root)), path_(std::move(path)), cpus_(cpus) {}

  std::string root_;  // the hierarchy's top group, where the processes go back
  std::string path_;
  double cpus_;
};

}  // namespace mitra::testing
