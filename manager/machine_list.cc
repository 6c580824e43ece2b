#include "manager/machine_list.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "common/strings.h"

namespace mitra::manager {
namespace {

constexpr int kMaxSlots = 1024;

std::string NotAHost(std::string_view text) {
  return "'" + std::string(text) +
         "' is not a host name (expected [user@]host[:port] [slots=N] [drain])";
}

std::string Lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Machines that are the same as far as duplicates go: names are case-insensitive and the
// loopback spellings are one machine.
std::string DuplicateKey(const Machine& m) {
  std::string host = Lower(m.host);
  if (host == "127.0.0.1") host = "localhost";
  return host + ":" + std::to_string(m.port);
}

bool IsIpv4(std::string_view text) {
  in_addr addr;
  return inet_pton(AF_INET, std::string(text).c_str(), &addr) == 1;
}

// Parses "[user@]host[:port]" into `m`; on failure returns the reason (empty on success).
std::string ParseAddress(std::string_view address, Machine* m) {
  std::string_view rest = address;
  const size_t at = rest.find('@');
  if (at != std::string_view::npos) {
    const std::string_view user = rest.substr(0, at);
    if (!IsValidUserName(user)) {
      return "'" + std::string(user) + "' in '" + std::string(address) +
             "' is not a user name (expected letters, digits, '_', '.', '-')";
    }
    m->user = std::string(user);
    rest.remove_prefix(at + 1);
  }
  std::string_view host = rest;
  std::string_view port;
  bool bracketed = false;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return "'" + std::string(address) + "' has no ']'";
    host = rest.substr(1, close - 1);
    bracketed = true;
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return NotAHost(address);
      port = after.substr(1);
      if (port.empty()) return "'" + std::string(address) + "' has an empty port";
    }
  } else if (const size_t colon = rest.find(':'); colon != std::string_view::npos) {
    if (rest.find(':', colon + 1) != std::string_view::npos) {
      return "'" + std::string(address) +
             "' is not a host name (write IPv6 addresses in brackets: [fe80::1]:22)";
    }
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (port.empty()) return "'" + std::string(address) + "' has an empty port";
  }
  if (bracketed ? !IsValidIpv6(host) : !IsValidHostName(host)) return NotAHost(address);
  m->host = std::string(host);
  if (!port.empty()) {
    const std::optional<int64_t> value = ParseInt64(port);
    if (!value || *value < 1 || *value > 65535) {
      return "port '" + std::string(port) + "' in '" + std::string(address) +
             "' is not a port number (1-65535)";
    }
    m->port = static_cast<int>(*value);
  }
  return "";
}

// Parses one non-empty, comment-free line; on failure returns the reason.
std::string ParseLine(std::string_view line, int default_slots, Machine* m) {
  const std::vector<std::string_view> fields = SplitFields(line);
  for (size_t i = 1; i < fields.size(); ++i) {
    if (fields[i].find('=') != std::string_view::npos || fields[i] == "drain") continue;
    // A field that is neither key=value nor drain: a space around '=' ("slots= 2"), or a second
    // machine on the line.
    const bool split_setting = fields[i - 1].back() == '=' ||
                               (i + 1 < fields.size() && fields[i + 1].front() == '=');
    if (split_setting) {
      return "'" + std::string(line) + "' has a space around '=': write slots=N";
    }
    return NotAHost(line);
  }
  if (std::string reason = ParseAddress(fields[0], m); !reason.empty()) return reason;
  m->slots = default_slots;
  bool have_slots = false;
  for (size_t i = 1; i < fields.size(); ++i) {
    const std::string_view field = fields[i];
    if (field == "drain") {
      if (m->drain) return "drain is given twice";
      m->drain = true;
      continue;
    }
    const std::string_view key = field.substr(0, field.find('='));
    const std::string_view value = field.substr(field.find('=') + 1);
    if (key != "slots") {
      return "unknown setting '" + std::string(field) +
             "' (a machine takes slots=N and the word drain)";
    }
    if (have_slots) return "slots= is given twice";
    const std::optional<int64_t> slots = ParseInt64(value);
    if (!slots || *slots < 1 || *slots > kMaxSlots) {
      return "'" + std::string(field) +
             "' is not a slot count (expected slots=N with 1 <= N <= " + std::to_string(kMaxSlots) +
             ")";
    }
    m->slots = static_cast<int>(*slots);
    have_slots = true;
  }
  return "";
}

}  // namespace

bool Machine::IsLocal() const {
  return user.empty() && port == 0 && (Lower(host) == "localhost" || host == "127.0.0.1");
}

std::string Machine::Address() const {
  std::string out;
  if (!user.empty()) out += user + "@";
  out += host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (port != 0) out += ":" + std::to_string(port);
  return out;
}

int MachineList::TotalSlots() const {
  int total = 0;
  for (const Machine& m : machines) total += m.slots;
  return total;
}

bool IsValidHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  bool all_numeric = true;
  size_t begin = 0;
  while (begin <= host.size()) {
    size_t end = host.find('.', begin);
    if (end == std::string_view::npos) end = host.size();
    const std::string_view label = host.substr(begin, end - begin);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (const char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
      if (!std::isdigit(static_cast<unsigned char>(c))) all_numeric = false;
    }
    begin = end + 1;
  }
  // "10.0.0.300" is neither a name nor an address.
  return !all_numeric || IsIpv4(host);
}

bool IsValidIpv6(std::string_view address) {
  if (address.empty() || address.size() > 45) return false;
  // Only what an address is written with: inet_pton reads a C string, so "::" followed by a NUL
  // and anything would pass as "::".
  if (address.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos) {
    return false;
  }
  in6_addr addr;
  return inet_pton(AF_INET6, std::string(address).c_str(), &addr) == 1;
}

bool IsValidUserName(std::string_view user) {
  if (user.empty() || user.size() > 32) return false;
  const unsigned char first = static_cast<unsigned char>(user.front());
  if (!std::isalpha(first) && first != '_') return false;
  return std::all_of(user.begin(), user.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

Result<MachineList> ParseMachineList(std::string_view text, std::string_view file_name,
                                     int default_slots) {
  MachineList list;
  std::vector<std::string> errors;
  std::map<std::string, int> first_line;  // duplicate key -> line of its first listing
  const std::vector<std::string_view> lines = SplitLines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const int line_number = static_cast<int>(i) + 1;
    const std::string_view line = Trim(lines[i].substr(0, lines[i].find('#')));
    if (line.empty()) continue;
    Machine m;
    m.line = line_number;
    const std::string prefix = std::string(file_name) + ":" + std::to_string(line_number) + ": ";
    if (std::string reason = ParseLine(line, default_slots, &m); !reason.empty()) {
      errors.push_back(prefix + reason);
      continue;
    }
    const auto [it, inserted] = first_line.emplace(DuplicateKey(m), line_number);
    if (!inserted) {
      errors.push_back(prefix + "'" + m.Address() + "' is already listed on line " +
                       std::to_string(it->second) + "; list each machine once, with all its slots");
      continue;
    }
    list.machines.push_back(std::move(m));
  }
  if (!errors.empty()) return Status::InvalidArgument(Join(errors, "\n"));
  if (list.machines.empty()) {
    return Status::InvalidArgument(std::string(file_name) +
                                   ": lists no machines; add a line such as `localhost slots=2`");
  }
  return list;
}

}  // namespace mitra::manager
