#include "tests/launcher/sshd_fixture.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/free_port.h"
#include "common/strings.h"

namespace mitra::testing {
namespace {

constexpr char kSshd[] = "/usr/sbin/sshd";

std::string FindProgram(const std::string& name) {
  for (const char* dir : {"/usr/bin/", "/bin/", "/usr/sbin/", "/usr/local/bin/"}) {
    const std::string path = dir + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

bool WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::trunc);
  out << contents;
  return static_cast<bool>(out);
}

bool AcceptsConnections(const std::string& address, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// /proc/PID/stat: the parent pid and the state letter (after the parenthesised name).
bool ReadStat(pid_t pid, pid_t* parent, char* state) {
  const std::string stat = ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(stat.substr(close + 1));
  long ppid = 0;
  rest >> *state >> ppid;
  *parent = static_cast<pid_t>(ppid);
  return static_cast<bool>(rest);
}

std::vector<pid_t> AllPids() {
  std::vector<pid_t> pids;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return pids;
  while (const dirent* entry = ::readdir(dir)) {
    if (std::optional<int64_t> pid = ParseInt64(entry->d_name)) {
      pids.push_back(static_cast<pid_t>(*pid));
    }
  }
  ::closedir(dir);
  return pids;
}

// True when the process's environment has SSH_CONNECTION=... ADDRESS PORT (a login through
// this host's sshd; processes started with `env -i` do not have it, their ancestry does).
bool LoggedInThrough(pid_t pid, const std::string& address, int port) {
  const std::string environ = ReadFileOrEmpty("/proc/" + std::to_string(pid) + "/environ");
  const std::string suffix = " " + address + " " + std::to_string(port);
  size_t at = 0;
  while ((at = environ.find("SSH_CONNECTION=", at)) != std::string::npos) {
    const size_t end = environ.find('\0', at);
    if (EndsWith(environ.substr(at, end - at), suffix)) return true;
    at = end == std::string::npos ? environ.size() : end;
  }
  return false;
}

bool GoneOrZombie(pid_t pid) {
  pid_t parent = 0;
  char state = 0;
  return !ReadStat(pid, &parent, &state) || state == 'Z' || state == 'X';
}

}  // namespace

Status GenerateSshKey(const std::string& path) {
  const std::string keygen = FindProgram("ssh-keygen");
  if (keygen.empty()) return Status::NotFound("ssh-keygen is not installed");
  const MitraResult r = RunProgram(
      keygen, {"-q", "-t", "ed25519", "-N", "", "-C", "mitra-test", "-f", path}, "/", 30);
  if (r.exit_code != 0) return Status::IoError("ssh-keygen failed: " + r.output());
  return Status::Ok();
}

std::string SshdFixture::UnavailableReason() {
  if (::access(kSshd, X_OK) != 0) {
    return "sshd is not installed (apt-get install openssh-server; scripts/setup does it)";
  }
  if (FindProgram("ssh-keygen").empty()) return "ssh-keygen is not installed";
  if (::geteuid() != 0) return "sshd on loopback needs root here (privilege separation)";
  return "";
}

Result<std::unique_ptr<SshdFixture>> SshdFixture::Create(
    const std::string& dir, const std::vector<std::string>& addresses) {
  if (std::string why = UnavailableReason(); !why.empty()) return Status::Unavailable(why);
  ::mkdir("/run/sshd", 0755);  // sshd's privilege separation directory
  std::unique_ptr<SshdFixture> fixture(new SshdFixture());
  fixture->dir_ = dir;
  fixture->identity_path_ = dir + "/id_ed25519";
  fixture->known_hosts_path_ = dir + "/known_hosts";
  if (Status s = GenerateSshKey(fixture->identity_path_); !s.ok()) return s;
  const std::string authorized = dir + "/authorized_keys";
  if (!WriteFile(authorized, ReadFileOrEmpty(fixture->identity_path_ + ".pub"))) {
    return Status::IoError("cannot write " + authorized);
  }
  std::string known_hosts;
  for (const std::string& address : addresses) {
    Host host;
    Result<int> port = PickFreeTcpPort(address);
    if (!port.ok()) return port.status();
    host.port = *port;
    const std::string key = dir + "/host-" + address;
    if (Status s = GenerateSshKey(key); !s.ok()) return s;
    const std::string public_key = ReadFileOrEmpty(key + ".pub");
    const std::vector<std::string_view> fields = SplitFields(Trim(public_key));
    if (fields.size() < 2) return Status::IoError("cannot read " + key + ".pub");
    host.known_hosts_line = "[" + address + "]:" + std::to_string(host.port) + " " +
                            std::string(fields[0]) + " " + std::string(fields[1]);
    known_hosts += host.known_hosts_line + "\n";
    host.config_path = dir + "/sshd-" + address + ".conf";
    host.log_path = dir + "/sshd-" + address + ".log";
    const std::string config = "ListenAddress " + address + "\nPort " + std::to_string(host.port) +
                               "\nHostKey " + key + "\nAuthorizedKeysFile " + authorized +
                               "\nPidFile " + dir + "/sshd-" + address +
                               ".pid\n"
                               "StrictModes no\nUsePAM no\nPermitRootLogin yes\n"
                               "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                               "PubkeyAuthentication yes\nUseDNS no\nPrintMotd no\n"
                               "MaxSessions 50\nMaxStartups 100\nLogLevel VERBOSE\n"
                               // bash started by sshd reads ~/.bashrc unless it is a nested
                               // shell; the tests' user's (one whose `pyenv rehash` waits a
                               // minute on a lock a killed session left) is not under test.
                               "SetEnv SHLVL=1\n";
    if (!WriteFile(host.config_path, config)) {
      return Status::IoError("cannot write " + host.config_path);
    }
    fixture->hosts_.emplace(address, std::move(host));
  }
  if (!WriteFile(fixture->known_hosts_path_, known_hosts)) {
    return Status::IoError("cannot write " + fixture->known_hosts_path_);
  }
  for (auto& [address, host] : fixture->hosts_) {
    if (Status s = fixture->Launch(address, host); !s.ok()) return s;
  }
  return fixture;
}

SshdFixture::~SshdFixture() {
  for (auto& [address, host] : hosts_) {
    Reconnect(address);
    Stop(address);
  }
}

std::string SshdFixture::PartitionUnavailableReason() {
  const std::string nft = FindProgram("nft");
  if (nft.empty()) return "nft is not installed (apt-get install nftables; scripts/setup does it)";
  const MitraResult r = RunProgram(nft, {"list", "tables"}, "/", 10);
  if (r.exit_code != 0) return "nft cannot change the firewall here: " + r.output();
  return "";
}

std::string SshdFixture::PartitionTable(const std::string& address) const {
  std::string name = "mitra_test_" + std::to_string(::getpid()) + "_" + address;
  for (char& c : name) {
    if (c == '.') c = '_';
  }
  return name;
}

Status SshdFixture::CutOff(const std::string& address) {
  if (Find(address) == nullptr) return Status::NotFound(address + " is not a host of the fixture");
  const std::string nft = FindProgram("nft");
  const std::string table = PartitionTable(address);
  // Loopback packets pass the output hook once, whichever way they go.
  const std::string rules = "table ip " + table + " {\n  chain out {\n" +
                            "    type filter hook output priority 0;\n" +
                            "    ip saddr " + address + " drop\n" +
                            "    ip daddr " + address + " drop\n  }\n}\n";
  const std::string file = dir_ + "/" + table + ".nft";
  if (!WriteFile(file, rules)) return Status::IoError("cannot write " + file);
  const MitraResult r = RunProgram(nft, {"-f", file}, "/", 10);
  if (r.exit_code != 0) return Status::IoError("nft -f " + file + ": " + r.output());
  return Status::Ok();
}

Status SshdFixture::Reconnect(const std::string& address) {
  const std::string nft = FindProgram("nft");
  if (nft.empty()) return Status::Ok();
  const std::string table = PartitionTable(address);
  const MitraResult listed = RunProgram(nft, {"list", "tables"}, "/", 10);
  if (listed.out.find(table) == std::string::npos) return Status::Ok();
  const MitraResult r = RunProgram(nft, {"delete", "table", "ip", table}, "/", 10);
  if (r.exit_code != 0) return Status::IoError("nft delete table " + table + ": " + r.output());
  return Status::Ok();
}

Status SshdFixture::LimitCpu(const std::string& address, double cpus) {
  Host* host = Find(address);
  if (host == nullptr) return Status::NotFound(address + " is not a host of the fixture");
  std::string name = "mitra-test-" + address;
  Result<std::unique_ptr<CpuQuota>> quota = CpuQuota::Create(name, cpus);
  if (!quota.ok()) return quota.status();
  host->quota = std::move(quota).value();
  if (!host->sshd) return Status::Ok();
  if (Status s = host->quota->Add(host->sshd->pid()); !s.ok()) return s;
  // What runs through it already (a worker mid-run) slows down now; signal 0 only finds them.
  // One that exits meanwhile cannot be moved, and need not be.
  for (const pid_t pid : SignalTree(address, *host, 0)) static_cast<void>(host->quota->Add(pid));
  return Status::Ok();
}

Status SshdFixture::Launch(const std::string& address, Host& host) {
  host.sshd = MitraProcess::Start(kSshd, {"-D", "-f", host.config_path, "-E", host.log_path}, dir_);
  if (!host.sshd) return Status::IoError("cannot start sshd for " + address);
  // Before it accepts a connection, so that every session is born in the group.
  if (host.quota) {
    if (Status s = host.quota->Add(host.sshd->pid()); !s.ok()) return s;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (AcceptsConnections(address, host.port)) return Status::Ok();
    if (GoneOrZombie(host.sshd->pid())) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  host.sshd.reset();
  return Status::Unavailable("sshd for " + address + ":" + std::to_string(host.port) +
                             " did not start: " + ReadFileOrEmpty(host.log_path));
}

std::vector<pid_t> SshdFixture::SignalTree(const std::string& address, const Host& host,
                                           int signal_number) {
  std::set<pid_t> tree = {host.sshd->pid()};
  for (int round = 0; round < 20; ++round) {
    const size_t before = tree.size();
    for (bool grew = true; grew;) {  // to a fixed point: children of new members join too
      grew = false;
      for (const pid_t pid : AllPids()) {
        if (tree.count(pid) != 0) continue;
        pid_t parent = 0;
        char state = 0;
        if ((ReadStat(pid, &parent, &state) && tree.count(parent) != 0) ||
            LoggedInThrough(pid, address, host.port)) {
          tree.insert(pid);
          grew = true;
        }
      }
    }
    for (const pid_t pid : tree) ::kill(pid, signal_number);
    if (round > 0 && tree.size() == before) break;  // stopped processes cannot fork
  }
  return {tree.begin(), tree.end()};
}

Status SshdFixture::Freeze(const std::string& address) {
  Host* host = Find(address);
  if (host == nullptr || !host->sshd) return Status::NotFound(address + " is not running");
  SignalTree(address, *host, SIGSTOP);
  return Status::Ok();
}

Status SshdFixture::Stop(const std::string& address) {
  Host* host = Find(address);
  if (host == nullptr) return Status::NotFound(address + " is not a host of the fixture");
  if (!host->sshd) return Status::Ok();
  const std::vector<pid_t> tree = SignalTree(address, *host, SIGSTOP);  // nothing escapes
  for (const pid_t pid : tree) ::kill(pid, SIGKILL);
  host->sshd->Wait(5);  // reaps the listener
  host->sshd.reset();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (const pid_t pid : tree) {
    while (!GoneOrZombie(pid) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!GoneOrZombie(pid)) {
      return Status::Timeout("process " + std::to_string(pid) + " of " + address +
                             " survived SIGKILL");
    }
  }
  return Status::Ok();
}

Status SshdFixture::Start(const std::string& address) {
  Host* host = Find(address);
  if (host == nullptr) return Status::NotFound(address + " is not a host of the fixture");
  if (host->sshd) {
    SignalTree(address, *host, SIGCONT);  // ends a Freeze
    return Status::Ok();
  }
  return Launch(address, *host);
}

SshdFixture::Host* SshdFixture::Find(const std::string& address) {
  auto it = hosts_.find(address);
  return it == hosts_.end() ? nullptr : &it->second;
}

const SshdFixture::Host* SshdFixture::Find(const std::string& address) const {
  auto it = hosts_.find(address);
  return it == hosts_.end() ? nullptr : &it->second;
}

int SshdFixture::port(const std::string& address) const {
  const Host* host = Find(address);
  return host == nullptr ? 0 : host->port;
}

std::string SshdFixture::known_hosts_line(const std::string& address) const {
  const Host* host = Find(address);
  return host == nullptr ? "" : host->known_hosts_line;
}

std::string SshdFixture::log_path(const std::string& address) const {
  const Host* host = Find(address);
  return host == nullptr ? "" : host->log_path;
}

launcher::SshOptions SshdFixture::Options(const std::string& address) const {
  launcher::SshOptions options;
  options.host = address;
  options.port = port(address);
  options.known_hosts_file = known_hosts_path_;
  options.identity_files = {identity_path_};
  return options;
}

}  // namespace mitra::testing
