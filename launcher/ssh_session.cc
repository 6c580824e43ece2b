#include "launcher/ssh_session.h"

#include <libssh/libssh.h>
#include <netdb.h>
#include <pwd.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>

#include "common/strings.h"

namespace mitra::launcher {
namespace {

std::string HomeDirectory() {
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return home;
  const passwd* entry = ::getpwuid(::getuid());
  return entry != nullptr && entry->pw_dir != nullptr ? entry->pw_dir : "/";
}

std::string CurrentUser() {
  const passwd* entry = ::getpwuid(::getuid());
  return entry != nullptr && entry->pw_name != nullptr ? entry->pw_name : "root";
}

int PortOf(const SshOptions& options) { return options.port == 0 ? 22 : options.port; }

std::string KnownHostsFile(const SshOptions& options) {
  return options.known_hosts_file.empty() ? HomeDirectory() + "/.ssh/known_hosts"
                                          : options.known_hosts_file;
}

// How known_hosts and ssh-keygen -R name the host: "host" on port 22, "[host]:port" otherwise.
std::string KnownHostsName(const SshOptions& options) {
  const int port = PortOf(options);
  return port == 22 ? options.host : "[" + options.host + "]:" + std::to_string(port);
}

std::string PortFlag(const SshOptions& options, const char* flag) {
  const int port = PortOf(options);
  return port == 22 ? "" : std::string(flag) + " " + std::to_string(port) + " ";
}

// "SHA256:..." of the key the server presented, or "" when it cannot be computed.
std::string ServerKeyFingerprint(ssh_session session) {
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(session, &key) != SSH_OK) return "";
  unsigned char* hash = nullptr;
  size_t length = 0;
  std::string fingerprint;
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &length) == SSH_OK) {
    char* text = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, length);
    if (text != nullptr) fingerprint = text;
    ssh_string_free_char(text);
    ssh_clean_pubkey_hash(&hash);
  }
  ssh_key_free(key);
  return fingerprint;
}

Status VerifyHostKey(ssh_session session, const SshOptions& options) {
  const std::string file = KnownHostsFile(options);
  const std::string name = KnownHostsName(options);
  const std::string fingerprint = ServerKeyFingerprint(session);
  const std::string presented = fingerprint.empty() ? "" : " (it presented " + fingerprint + ")";
  const std::string accept =
      "`ssh-keyscan " + PortFlag(options, "-p") + options.host + " >> " + file + "`";
  switch (ssh_session_is_known_server(session)) {
    case SSH_KNOWN_HOSTS_OK:
      return Status::Ok();
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER:
      return Status::InvalidArgument(
          "the host key of " + name + " has changed since it was recorded in " + file + presented +
          "; this may be an attack, or the host was reinstalled. If the new key is "
          "right, remove the old one with `ssh-keygen -R '" +
          name + "' -f " + file + "` and accept the new one with " + accept);
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
      return Status::InvalidArgument("the host key of " + name + " is not known" + presented +
                                     ": it is not in " + file +
                                     ". If this is the right host, accept its key with " + accept +
                                     " or by connecting "
                                     "once with `ssh " +
                                     PortFlag(options, "-p") + options.host + "`");
    case SSH_KNOWN_HOSTS_ERROR:
      break;
  }
  return Status::InvalidArgument("cannot check the host key of " + name + " against " + file +
                                 ": " + ssh_get_error(session));
}

// Tries the agent and the key files; each attempt that fails leaves a note for the message.
Status Authenticate(ssh_session session, const SshOptions& options) {
  std::vector<std::string> notes;
  std::vector<std::string> files = options.identity_files;
  bool explicit_files = !files.empty();
  if (!explicit_files) {
    if (std::getenv("SSH_AUTH_SOCK") != nullptr) {
      const int rc = ssh_userauth_agent(session, nullptr);
      if (rc == SSH_AUTH_SUCCESS) return Status::Ok();
      if (rc == SSH_AUTH_ERROR) {
        return Status::Unavailable("logging in to " + DescribeHost(options) +
                                   " failed: " + ssh_get_error(session));
      }
      notes.push_back("the ssh-agent's keys were refused");
    }
    const std::string dir = HomeDirectory() + "/.ssh/";
    files = {dir + "id_ed25519", dir + "id_ecdsa", dir + "id_rsa"};
  }
  for (const std::string& file : files) {
    if (!explicit_files && ::access(file.c_str(), R_OK) != 0) continue;
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_file(file.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK) {
      notes.push_back(file +
                      " cannot be read (missing, not a private key, or protected by a "
                      "passphrase: add such a key to ssh-agent)");
      continue;
    }
    const int rc = ssh_userauth_publickey(session, nullptr, key);
    ssh_key_free(key);
    if (rc == SSH_AUTH_SUCCESS) return Status::Ok();
    if (rc == SSH_AUTH_ERROR) {
      return Status::Unavailable("logging in to " + DescribeHost(options) +
                                 " failed: " + ssh_get_error(session));
    }
    notes.push_back(rc == SSH_AUTH_PARTIAL ? file + " was accepted but the server asks for more"
                                           : file + " was refused");
  }
  if (notes.empty())
    notes.push_back(
        "no ssh-agent and no key in ~/.ssh (id_ed25519, id_ecdsa, "
        "id_rsa)");
  std::string user = options.user.empty() ? CurrentUser() : options.user;
  return Status::InvalidArgument(
      "cannot log in to " + DescribeHost(options) + " with a public key: " + Join(notes, "; ") +
      ". Add your public key to ~" + user + "/.ssh/authorized_keys there (e.g. `ssh-copy-id " +
      PortFlag(options, "-p") + user + "@" + options.host + "`) or name the key to use");
}

Status SetOption(ssh_session session, ssh_options_e option, const void* value, const char* what) {
  if (ssh_options_set(session, option, value) == 0) return Status::Ok();
  return Status::InvalidArgument(std::string("bad SSH option ") + what + ": " +
                                 ssh_get_error(session));
}

}  // namespace

std::string DescribeHost(const SshOptions& options) {
  return (options.user.empty() ? CurrentUser() : options.user) + "@" + options.host + ":" +
         std::to_string(PortOf(options));
}

namespace detail {

void SshSessionDeleter::operator()(ssh_session_struct* session) const {
  if (ssh_is_connected(session)) ssh_disconnect(session);
  ssh_free(session);
}

Result<SshSessionPtr> OpenSshSession(const SshOptions& options) {
  if (options.host.empty() || options.host.find_first_of("@ \t\n") != std::string::npos) {
    return Status::InvalidArgument("'" + options.host + "' is not a host name or address");
  }
  SshSessionPtr session(ssh_new());
  if (!session) return Status::Internal("libssh cannot allocate a session");
  ssh_session s = session.get();
  const unsigned port = static_cast<unsigned>(PortOf(options));
  const bool no = false;
  const std::string known_hosts = KnownHostsFile(options);
  const double timeout = std::max(0.001, options.connect_timeout_s);
  const long timeout_s = static_cast<long>(std::floor(timeout));
  const long timeout_us = static_cast<long>((timeout - std::floor(timeout)) * 1e6);
  for (const Status& status :
       {SetOption(s, SSH_OPTIONS_HOST, options.host.c_str(), "host"),
        SetOption(s, SSH_OPTIONS_PORT, &port, "port"),
        SetOption(s, SSH_OPTIONS_PROCESS_CONFIG, &no, "process_config"),
        SetOption(s, SSH_OPTIONS_KNOWNHOSTS, known_hosts.c_str(), "known_hosts"),
        SetOption(s, SSH_OPTIONS_TIMEOUT, &timeout_s, "timeout"),
        SetOption(s, SSH_OPTIONS_TIMEOUT_USEC, &timeout_us, "timeout"),
        options.user.empty() ? Status::Ok()
                             : SetOption(s, SSH_OPTIONS_USER, options.user.c_str(), "user")}) {
    if (!status.ok()) return status;
  }
  if (ssh_connect(s) != SSH_OK) {
    // A name that does not resolve is most likely misspelt; the resolver is asked again only
    // on this path, where the connection has failed already.
    addrinfo* found = nullptr;
    const bool resolves = ::getaddrinfo(options.host.c_str(), nullptr, nullptr, &found) == 0;
    if (found != nullptr) ::freeaddrinfo(found);
    return Status::Unavailable(
        "cannot connect to " + DescribeHost(options) + ": " + ssh_get_error(s) +
        (resolves ? "; check that the host is up and that sshd listens on port " +
                        std::to_string(port)
                  : "; no address has that name: check its spelling in the machine list"));
  }
  if (Status status = VerifyHostKey(s, options); !status.ok()) return status;
  if (Status status = Authenticate(s, options); !status.ok()) return status;
  return session;
}

}  // namespace detail
}  // namespace mitra::launcher
