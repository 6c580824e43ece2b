// Opening an authenticated SSH connection to one host (libssh): options, host key check, login.
//
// The host key is checked against a known_hosts file before anything is sent; an unknown or
// changed key refuses the host with a message that names the file and the command that accepts
// the key. Login uses public keys only: the ssh-agent and key files without a passphrase.
// ~/.ssh/config is not read: everything comes from SshOptions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mitra/common/status.h"

struct ssh_session_struct;  // libssh's session; only ssh_session.cc and its users see libssh

namespace mitra::launcher {

struct SshOptions {
  std::string user;              // "": the current user
  std::string host;              // a host name or an address
  int port = 0;                  // 0: 22
  std::string known_hosts_file;  // "": ~/.ssh/known_hosts
  // Private key files (OpenSSH format, no passphrase), tried in order. Empty: the ssh-agent
  // when SSH_AUTH_SOCK is set, then ~/.ssh/id_ed25519, ~/.ssh/id_ecdsa and ~/.ssh/id_rsa.
  std::vector<std::string> identity_files;
  double connect_timeout_s = 10;  // connecting, logging in and each request's round trip
  // A keepalive is sent every keepalive_interval_s; the connection counts as lost after
  // keepalive_count intervals without an answer (by default a vanished host is noticed
  // within ~3 s).
  double keepalive_interval_s = 1;
  int keepalive_count = 3;
};

// "user@host:port" as the options resolve it, for messages.
std::string DescribeHost(const SshOptions& options);

namespace detail {

struct SshSessionDeleter {
  void operator()(ssh_session_struct* session) const;  // disconnects and frees
};
using SshSessionPtr = std::unique_ptr<ssh_session_struct, SshSessionDeleter>;

// Connects, checks the host key and logs in; blocks for up to about connect_timeout_s per step.
// The session is in blocking mode with connect_timeout_s as its timeout. Errors:
//   Unavailable      the host cannot be reached now (down, refused, timed out; or its name does
//                    not resolve, which the message calls a likely misspelling, after asking
//                    the resolver once more); retrying may help
//   InvalidArgument  the host answered but is refused until the user acts: unknown or changed
//                    host key, no key accepted, bad options. The message says what to do.
Result<SshSessionPtr> OpenSshSession(const SshOptions& options);

}  // namespace detail
}  // namespace mitra::launcher
