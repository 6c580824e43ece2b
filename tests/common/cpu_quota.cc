#include "tests/common/cpu_quota.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <sstream>

#include "tests/common/run_helpers.h"

namespace mitra::testing {
namespace {

constexpr char kV1Root[] = "/sys/fs/cgroup/cpu";
constexpr char kV2Root[] = "/sys/fs/cgroup";
// The kernel's shortest quota: a quota is granted per period, so within a longer one a process
// runs at full speed until its quota is spent and then waits, and a measurement shorter than
// the period would see a fast machine. The period is therefore as short as the quota allows
// (2.5 ms for 0.4 CPUs): the slowness as even as the kernel can make it.
constexpr int64_t kShortestQuotaUs = 1000;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// v1 when its cpu controller is mounted; else v2 when the root offers `cpu`; else "".
std::string Root(bool* v1) {
  *v1 = Exists(std::string(kV1Root) + "/cpu.cfs_quota_us");
  if (*v1) return kV1Root;
  const std::string controllers = ReadFileOrEmpty(std::string(kV2Root) + "/cgroup.controllers");
  std::istringstream words(controllers);
  for (std::string word; words >> word;) {
    if (word == "cpu") return kV2Root;
  }
  return "";
}

Status Write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();  // the kernel answers the write here
  if (!out) return Status::IoError("cannot write '" + text + "' to " + path);
  return Status::Ok();
}

}  // namespace

std::string CpuQuota::UnavailableReason() {
  bool v1 = false;
  const std::string root = Root(&v1);
  if (root.empty()) return "no cgroup cpu controller is mounted (/sys/fs/cgroup/cpu, cgroup v2's cpu)";
  const std::string probe = root + "/mitra-probe-" + std::to_string(::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0) return "cannot make a cgroup under " + root + " (root?)";
  ::rmdir(probe.c_str());
  return "";
}

Result<std::unique_ptr<CpuQuota>> CpuQuota::Create(const std::string& name, double cpus) {
  bool v1 = false;
  const std::string root = Root(&v1);
  if (root.empty()) return Status::Unavailable(UnavailableReason());
  if (!(cpus > 0)) return Status::InvalidArgument("a CPU quota must be more than 0 CPUs");
  const std::string path = root + "/" + name + "-" + std::to_string(::getpid());
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::IoError("cannot make the cgroup " + path);
  }
  std::unique_ptr<CpuQuota> quota(new CpuQuota(root, path, cpus));
  const int64_t period_us = std::llround(kShortestQuotaUs / std::min(cpus, 1.0));
  const int64_t quota_us = std::llround(cpus * static_cast<double>(period_us));
  if (v1) {
    if (Status s = Write(path + "/cpu.cfs_period_us", std::to_string(period_us)); !s.ok()) return s;
    if (Status s = Write(path + "/cpu.cfs_quota_us", std::to_string(quota_us)); !s.ok()) return s;
  } else {
    if (Status s = Write(root + "/cgroup.subtree_control", "+cpu"); !s.ok()) return s;
    const std::string max = std::to_string(quota_us) + " " + std::to_string(period_us);
    if (Status s = Write(path + "/cpu.max", max); !s.ok()) return s;
  }
  return quota;
}

CpuQuota::~CpuQuota() {
  std::istringstream pids(ReadFileOrEmpty(path_ + "/cgroup.procs"));
  for (std::string pid; pids >> pid;) Write(root_ + "/cgroup.procs", pid);
  ::rmdir(path_.c_str());
}

Status CpuQuota::Add(pid_t pid) {
  return Write(path_ + "/cgroup.procs", std::to_string(pid));
}

}  // namespace mitra::testing
