// SshdFixture: real OpenSSH servers on loopback addresses, for integration tests.
//
// One sshd per address (127.0.0.2, 127.0.0.3, ... all of 127/8 is local on Linux), each on a
// free port, with its own host key; one user key that every server accepts; a known_hosts file
// that lists every server. A test can stop a host (its sshd and everything started through it
// die, as when a machine vanishes), freeze it (as when it hangs), and start it again.
//
//   MITRA_SKIP_WITHOUT(SshdFixture::UnavailableReason());   (tests/prerequisite.h)
//   Result<std::unique_ptr<SshdFixture>> sshd = SshdFixture::Create(dir.path(), {"127.0.0.2"});
//   SshProcessRunnerOptions options;
//   options.ssh = (*sshd)->Options("127.0.0.2");   // host, port, known_hosts, identity
//
// Needs /usr/sbin/sshd and ssh-keygen (Debian's openssh-server) and to run as root (sshd's
// privilege separation directory /run/sshd is created when missing). Not thread-safe; every
// wait is bounded (a few seconds).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mitra/common/status.h"
#include "launcher/ssh_session.h"
#include "tests/common/cpu_quota.h"
#include "tests/common/run_helpers.h"

namespace mitra::testing {

class SshdFixture {
 public:
  // "" when sshd can be run here; otherwise why not (for MITRA_SKIP_WITHOUT).
  static std::string UnavailableReason();

  // Generates the keys and configurations under `dir` (which must exist and outlive the
  // fixture) and starts one sshd per address; returns once each accepts connections.
  static Result<std::unique_ptr<SshdFixture>> Create(const std::string& dir,
                                                     const std::vector<std::string>& addresses);
  // Stops every host.
  ~SshdFixture();

  SshdFixture(const SshdFixture&) = delete;
  SshdFixture& operator=(const SshdFixture&) = delete;

  // SIGKILLs the host's sshd and every process it started (its sessions and their
  // descendants, found through /proc), after freezing them all so that none escapes; returns
  // once they are gone. Connections to the host see their socket close.
  Status Stop(const std::string& address);
  // SIGSTOPs the host's sshd and every process it started: connections stay open but nothing
  // answers, as when a machine hangs. Stop or Start ends the freeze.
  Status Freeze(const std::string& address);
  // Starts the host's sshd again (same port and keys) after Stop, returning once it accepts;
  // after Freeze, lets it and its processes run on (SIGCONT).
  Status Start(const std::string& address);

  // "" when CutOff can work here (nft, from Debian's nftables, and the right to use it);
  // otherwise why not (for MITRA_SKIP_WITHOUT).
  static std::string PartitionUnavailableReason();
  // Cuts the host off the network: an nftables rule drops every packet from or to its address,
  // so its processes run on but nothing reaches them or comes back, as in a network partition.
  // Reconnect (or the fixture's end) removes the rule. The rule is the address's, not this
  // fixture's: another test using the address at the same time is cut off too (scripts/test
  // runs the tests one at a time).
  Status CutOff(const std::string& address);
  Status Reconnect(const std::string& address);

  // Makes the host a slower machine: its sshd, what runs through it now, and everything started
  // through it from now on (and after a Stop and Start), shares `cpus` CPUs' time (0.4: 40% of
  // one core) in a cgroup of its own (tests/common/cpu_quota.h; skip with
  // CpuQuota::UnavailableReason()).
  Status LimitCpu(const std::string& address, double cpus);

  const std::string& known_hosts_path() const { return known_hosts_path_; }
  const std::string& identity_path() const { return identity_path_; }
  int port(const std::string& address) const;
  // The host's line in known_hosts: "[127.0.0.2]:PORT ssh-ed25519 AAAA...".
  std::string known_hosts_line(const std::string& address) const;
  // sshd's own log for the host (-E), for test failure messages.
  std::string log_path(const std::string& address) const;
  // Options that reach the host as the current user with the fixture's key and known_hosts.
  launcher::SshOptions Options(const std::string& address) const;

 private:
  struct Host {
    int port = 0;
    std::string config_path;
    std::string log_path;
    std::string known_hosts_line;
    std::unique_ptr<MitraProcess> sshd;  // null while stopped
    std::unique_ptr<CpuQuota> quota;     // LimitCpu's; null: the whole machine
  };

  SshdFixture() = default;
  // The nftables table of CutOff's rules for `address`.
  std::string PartitionTable(const std::string& address) const;
  Host* Find(const std::string& address);
  const Host* Find(const std::string& address) const;
  Status Launch(const std::string& address, Host& host);
  // The sshd and every process it started (descendants, and sessions that name the host in
  // SSH_CONNECTION), each sent `signal_number`, repeated until the set stops growing.
  std::vector<pid_t> SignalTree(const std::string& address, const Host& host, int signal_number);

  std::string dir_;
  std::string known_hosts_path_;
  std::string identity_path_;
  std::map<std::string, Host> hosts_;
};

// Writes a new ed25519 key pair without a passphrase: `path` and `path`.pub.
Status GenerateSshKey(const std::string& path);

}  // namespace mitra::testing
