// The machine list: which machines the job may use and how many workers each takes.
//
//   # one machine per line; '#' starts a comment
//   localhost slots=2            # local processes, no SSH
//   10.0.0.7 slots=4             # SSH to port 22 as the current user
//   alice@node12:2222 slots=8    # user, port
//   node13                       # bare host: default_slots (--gpus-per-node, 1 by default)
//   node14 slots=8 drain         # listed, but the job moves off it and keeps out
//
// Host names are validated so that nothing a shell would interpret can ever reach one: a host
// is a DNS name (letters, digits, '-', '.'), an IPv4 address or a bracketed IPv6 address; a
// user is [A-Za-z_][A-Za-z0-9_.-]*; a port is 1..65535.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::manager {

struct Machine {
  std::string user;  // "" = the current user
  std::string host;  // as written (IPv6 without brackets)
  int port = 0;      // 0 = the SSH default
  int slots = 1;
  bool drain = false;  // `drain` on its line: the job keeps off it while the word is there
  int line = 0;  // 1-based line in the file, for messages

  // `localhost` or `127.0.0.1` without user or port: workers run as local processes. With a
  // user or port the entry means SSH to this machine, like any remote host.
  bool IsLocal() const;
  // "alice@node12:2222", "[::1]:22", "localhost".
  std::string Address() const;
};

struct MachineList {
  std::vector<Machine> machines;
  int TotalSlots() const;
};

// Parses the text of a machine list. `file_name` only labels messages. Every bad line is
// reported, one per line of the message: "machines.txt:7: 'node 4' is not a host name
// (expected [user@]host[:port] [slots=N] [drain])". A host listed twice is an error (localhost and
// 127.0.0.1 are one host); so is a list without machines.
Result<MachineList> ParseMachineList(std::string_view text, std::string_view file_name,
                                     int default_slots);

// The checks behind the parser, exposed for tests and for other inputs that name hosts.
bool IsValidHostName(std::string_view host);  // DNS name or IPv4 address
bool IsValidIpv6(std::string_view address);   // without brackets
bool IsValidUserName(std::string_view user);

}  // namespace mitra::manager
