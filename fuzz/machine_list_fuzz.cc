// The machine list (manager/machine_list.h): the file the user edits while a job runs, parsed
// at start and again on every save.
//
// Invariants: a parsed list has machines, each with a valid host, user and port and 1..1024
// slots, no two the same machine; each machine's Address() (what ssh and the messages get)
// holds only characters a shell leaves alone and parses back to the same machine.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "manager/machine_list.h"

namespace mitra::manager {
namespace {

void CheckMachine(const Machine& m) {
  FUZZ_CHECK(!m.host.empty());
  FUZZ_CHECK(IsValidHostName(m.host) || IsValidIpv6(m.host));
  FUZZ_CHECK(m.user.empty() || IsValidUserName(m.user));
  FUZZ_CHECK(m.port >= 0 && m.port <= 65535);
  FUZZ_CHECK(m.slots >= 1 && m.slots <= 1024);
  FUZZ_CHECK(m.line >= 1);

  const std::string address = m.Address();
  FUZZ_CHECK(address.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789._-@:[]") == std::string::npos);
  Result<MachineList> again =
      ParseMachineList(address + " slots=" + std::to_string(m.slots), "again", 1);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->machines.size() == 1);
  const Machine& back = again->machines[0];
  FUZZ_CHECK(back.user == m.user);
  FUZZ_CHECK(back.host == m.host);
  FUZZ_CHECK(back.port == m.port);
  FUZZ_CHECK(back.slots == m.slots);
  FUZZ_CHECK(back.IsLocal() == m.IsLocal());
}

}  // namespace
}  // namespace mitra::manager

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mitra::manager;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr int kDefaultSlots = 2;
  mitra::Result<MachineList> list = ParseMachineList(text, "machines.txt", kDefaultSlots);
  if (!list.ok()) {
    FUZZ_CHECK(list.status().code() == mitra::Status::Code::kInvalidArgument);
    FUZZ_CHECK(!list.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(!list->machines.empty());
  std::set<std::string> addresses;
  int64_t slots = 0;
  for (const Machine& m : list->machines) {
    CheckMachine(m);
    slots += m.slots;
    // Distinct machines have distinct addresses (the parser refuses a machine listed twice).
    FUZZ_CHECK(addresses.insert(m.Address()).second);
  }
  FUZZ_CHECK(list->TotalSlots() == slots);
  return 0;
}
