// MachinePool: the machines the job may use, as the controller sees them.
//
// Each machine of the list is usable, being checked, or failed (kept out until its next health
// check is due). The pool remembers machines that left the list too: their failure history
// counts again if they come back. Rules:
//   - a machine that enters the list (new, or back after it was removed) joins only after a
//     passed health check; `localhost` needs none;
//   - the first failure of the job blamed on a machine asks for a check at once; a second one
//     within the failure window keeps it out for backoff_base_s, then 2x, 4x, ... (`localhost`
//     is checked at once every time: its failures are the program's, not the machine's);
//   - every failed check doubles the wait before the next one (backoff_base_s, 2x, 4x, ... up
//     to backoff_max_s); a passed check makes the machine usable and resets the wait;
//   - a drained machine (the word `drain` on its line, or Drain: `mitra drain`, a preemption
//     notice, a straggler) is not usable, whatever its health, until its line changes.
// Pure: time comes in as arguments, and checks to run go out as return values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "manager/machine_list.h"
#include "manager/machine_state.h"

namespace mitra::manager {

struct MachinePoolOptions {
  double backoff_base_s = 2;
  double backoff_max_s = 300;
  double failure_window_s = 600;  // job failures older than this are forgotten
};

// A machine of the list (or one that left it while ranks still ran there), as status shows it.
struct MachineView {
  Machine machine;
  MachineState state = MachineState::kIdle;
  int used_slots = 0;
  double retry_at = 0;  // kFailed: when the next health check is due (controller time)
  std::string reason;   // kFailed, kChecking: why; kDrained: by what
};

class MachinePool {
 public:
  explicit MachinePool(MachinePoolOptions options) : options_(options) {}

  // What an edit of the list changed.
  struct Change {
    std::vector<std::string> added;    // addresses
    std::vector<std::string> removed;  // addresses
    std::vector<std::string> resized;  // "ADDRESS 4 -> 2 slots"
    std::vector<std::string> drained;  // addresses whose line now says `drain`
    std::vector<std::string> undrained;  // drained ones whose line changed
    std::vector<Machine> to_check;     // health checks to start now
    std::string Describe() const;  // "added a; removed b; c 4 -> 2 slots; drained d"
  };

  // The list at start: every machine usable.
  void Reset(const MachineList& list);
  // A new list; machines that enter it are to be checked before they join.
  Change Update(const MachineList& list);

  // Keeps the listed machine at `address` out of the job until its line in the list changes;
  // `by` says what asked ("mitra drain", "preemption notice", ...). False when no listed
  // machine has that address; true (and nothing changes) when it is drained already.
  bool Drain(const std::string& address, const std::string& by);
  bool Drained(const std::string& address) const;

  // A failure of the job blamed on the machine at `address`: checked at once the first time,
  // kept out with backoff when it fails again within the window.
  struct Blame {
    std::optional<Machine> check_now;  // start this check
    bool kept_out = false;             // or: out until `backoff_s` from now
    double backoff_s = 0;
    int failures = 0;  // job failures blamed on it within the window, this one included
  };
  Blame BlameFailure(const std::string& address, const std::string& why, double now);

  struct CheckResult {
    bool known = false;    // the address is one of the pool's
    bool listed = false;   // and in the list now
    bool joined = false;   // it was out and is usable now
    bool first = false;    // it never failed the job (it is new to it)
    double backoff_s = 0;  // failed: the wait before the next check
    int failed_checks = 0;
  };
  // A health check's answer.
  CheckResult OnChecked(const std::string& address, bool healthy, const std::string& reason,
                        double now);

  // Failed machines whose next check is due at `now`; they are marked as being checked.
  std::vector<Machine> DueChecks(double now);
  // When the next check falls due (infinity: none waits).
  double NextCheckDue() const;
  // Whether a listed machine's check is under way.
  bool CheckInFlight() const;

  // The usable listed machines, in list order; `out` gets "ADDRESS (failed)" for the others.
  std::vector<Machine> Usable(std::vector<std::string>* out) const;
  // Whether `machine` (as launched) left the list, lost slots or was drained since.
  bool Shrunk(const Machine& machine) const;
  const Machine* Find(const std::string& address) const;

  // The listed machines (and unlisted ones with ranks still on them), with `used` slots each.
  std::vector<MachineView> Views(const std::vector<std::string>& rank_addresses) const;

 private:
  enum class Health { kUsable, kChecking, kFailed };
  struct Entry {
    Machine machine;
    bool listed = true;
    Health health = Health::kUsable;
    bool check_in_flight = false;
    int failures = 0;       // job failures blamed on it, within the window
    double last_failure = -1e18;
    int failed_checks = 0;  // in a row
    double retry_at = 0;
    std::string reason;
    std::string drained_by;  // Drain's `by` until the line changes; "" when not asked
    bool IsDrained() const { return machine.drain || !drained_by.empty(); }
  };
  Entry* FindEntry(const std::string& address);
  const Entry* FindEntry(const std::string& address) const;
  double Backoff(int n) const;  // backoff_base_s * 2^(n-1), at most backoff_max_s

  MachinePoolOptions options_;
  std::vector<Entry> entries_;  // listed ones in list order, then the others
};

}  // namespace mitra::manager
