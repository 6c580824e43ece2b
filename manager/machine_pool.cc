#include "manager/machine_pool.h"

#include <algorithm>
#include <unordered_map>
#include <cmath>
#include <limits>

#include "common/strings.h"

namespace mitra::manager {

std::string MachinePool::Change::Describe() const {
  std::vector<std::string> parts;
  if (!added.empty()) parts.push_back("added " + Join(added, ", "));
  if (!removed.empty()) parts.push_back("removed " + Join(removed, ", "));
  if (!resized.empty()) parts.push_back(Join(resized, ", "));
  if (!drained.empty()) parts.push_back("drained " + Join(drained, ", "));
  if (!undrained.empty()) parts.push_back("no longer drained " + Join(undrained, ", "));
  return parts.empty() ? "no machine added or removed" : Join(parts, "; ");
}

void MachinePool::Reset(const MachineList& list) {
  entries_.clear();
  for (const Machine& m : list.machines) {
    Entry e;
    e.machine = m;
    entries_.push_back(std::move(e));
  }
}

MachinePool::Change MachinePool::Update(const MachineList& list) {
  Change change;
  std::vector<Entry> entries;
  for (const Machine& m : list.machines) {
    Entry* known = FindEntry(m.Address());
    Entry e;
    if (known == nullptr) {
      change.added.push_back(m.Address());
      e.health = Health::kChecking;
    } else {
      e = *known;
      if (!known->listed) {
        change.added.push_back(m.Address());
        if (e.health == Health::kUsable) e.health = Health::kChecking;  // it may have changed
      } else if (known->machine.slots != m.slots) {
        change.resized.push_back(m.Address() + " " + std::to_string(known->machine.slots) +
                                 " -> " + std::to_string(m.slots) + " slots");
      }
      const bool line_changed = !known->listed || known->machine.slots != m.slots ||
                                known->machine.drain != m.drain;
      if (m.drain && (line_changed || !known->IsDrained())) {
        change.drained.push_back(m.Address());
      } else if (!m.drain && known->IsDrained() && line_changed) {
        change.undrained.push_back(m.Address());
      }
      if (line_changed) e.drained_by.clear();  // a drain asked for holds until the line changes
    }
    if (known == nullptr && m.drain) change.drained.push_back(m.Address());
    e.machine = m;
    e.listed = true;
    entries.push_back(std::move(e));
  }
  for (Entry& e : entries_) {
    const bool still = std::any_of(list.machines.begin(), list.machines.end(), [&](const Machine& m) {
      return m.Address() == e.machine.Address();
    });
    if (still) continue;
    if (e.listed) change.removed.push_back(e.machine.Address());
    e.listed = false;
    entries.push_back(std::move(e));  // remembered: its history counts if it comes back
  }
  entries_ = std::move(entries);
  // A machine joins only once it has passed a health check: one that cannot be reached (or
  // whose host key is wrong) must not make the running job morph onto it and fail. This
  // machine's own processes need no check.
  for (Entry& e : entries_) {
    if (!e.listed || e.health != Health::kChecking || e.check_in_flight) continue;
    if (e.machine.IsLocal()) {
      e.health = Health::kUsable;
      continue;
    }
    e.check_in_flight = true;
    change.to_check.push_back(e.machine);
  }
  return change;
}

bool MachinePool::Drain(const std::string& address, const std::string& by) {
  Entry* e = FindEntry(address);
  if (e == nullptr || !e->listed) return false;
  if (!e->IsDrained()) e->drained_by = by;
  return true;
}

bool MachinePool::Drained(const std::string& address) const {
  const Entry* e = FindEntry(address);
  return e != nullptr && e->IsDrained();
}

MachinePool::Blame MachinePool::BlameFailure(const std::string& address, const std::string& why,
                                             double now) {
  Blame blame;
  Entry* e = FindEntry(address);
  if (e == nullptr) return blame;
  if (now - e->last_failure > options_.failure_window_s) e->failures = 0;
  blame.failures = ++e->failures;
  e->last_failure = now;
  e->reason = why;
  // This machine's own processes failing says nothing about the machine (a program that
  // crashes, a killed worker): its check passes at once, and only the restart budget limits it.
  if ((e->failures == 1 || e->machine.IsLocal()) && e->listed) {
    e->health = Health::kChecking;
    e->check_in_flight = true;
    blame.check_now = e->machine;
    return blame;
  }
  blame.kept_out = true;
  blame.backoff_s = Backoff(e->failures - 1);
  e->health = Health::kFailed;
  e->retry_at = now + blame.backoff_s;
  return blame;
}

MachinePool::CheckResult MachinePool::OnChecked(const std::string& address, bool healthy,
                                                const std::string& reason, double now) {
  CheckResult result;
  Entry* e = FindEntry(address);
  if (e == nullptr) return result;
  result.known = true;
  result.listed = e->listed;
  result.first = e->failures == 0;
  e->check_in_flight = false;
  if (healthy) {
    result.joined = e->health != Health::kUsable;
    e->health = Health::kUsable;
    e->failed_checks = 0;
    e->reason.clear();
    return result;
  }
  result.failed_checks = ++e->failed_checks;
  result.backoff_s = Backoff(e->failed_checks);
  e->health = Health::kFailed;
  e->retry_at = now + result.backoff_s;
  e->reason = reason;
  return result;
}

std::vector<Machine> MachinePool::DueChecks(double now) {
  std::vector<Machine> due;
  for (Entry& e : entries_) {
    if (!e.listed || e.health != Health::kFailed || e.check_in_flight || now < e.retry_at) {
      continue;
    }
    e.health = Health::kChecking;
    e.check_in_flight = true;
    due.push_back(e.machine);
  }
  return due;
}

double MachinePool::NextCheckDue() const {
  double next = std::numeric_limits<double>::infinity();
  for (const Entry& e : entries_) {
    if (e.listed && e.health == Health::kFailed && !e.check_in_flight) {
      next = std::min(next, e.retry_at);
    }
  }
  return next;
}

bool MachinePool::CheckInFlight() const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [](const Entry& e) { return e.listed && e.check_in_flight; });
}

std::vector<Machine> MachinePool::Usable(std::vector<std::string>* out) const {
  std::vector<Machine> usable;
  for (const Entry& e : entries_) {
    if (!e.listed) continue;
    if (e.health == Health::kUsable && !e.IsDrained()) {
      usable.push_back(e.machine);
    } else if (out != nullptr) {
      out->push_back(e.machine.Address() + (e.IsDrained()                   ? " (drained)"
                                            : e.health == Health::kChecking ? " (being checked)"
                                                                            : " (failed)"));
    }
  }
  return usable;
}

bool MachinePool::Shrunk(const Machine& machine) const {
  const Entry* e = FindEntry(machine.Address());
  return e == nullptr || !e->listed || e->IsDrained() || e->machine.slots < machine.slots;
}

const Machine* MachinePool::Find(const std::string& address) const {
  const Entry* e = FindEntry(address);
  return e == nullptr ? nullptr : &e->machine;
}

std::vector<MachineView> MachinePool::Views(const std::vector<std::string>& rank_addresses) const {
  std::unordered_map<std::string, int> used;  // one pass: a job has ranks x machines to count
  for (const std::string& address : rank_addresses) ++used[address];
  std::vector<MachineView> views;
  for (const Entry& e : entries_) {
    MachineView v;
    v.machine = e.machine;
    const auto it = used.find(e.machine.Address());
    v.used_slots = it == used.end() ? 0 : it->second;
    if (!e.listed) {
      if (v.used_slots == 0) continue;
      v.state = MachineState::kRemoved;
    } else if (e.IsDrained()) {
      v.state = MachineState::kDrained;
      v.reason = e.machine.drain ? "drain in the machine list" : e.drained_by;
    } else if (e.health == Health::kFailed) {
      v.state = MachineState::kFailed;
      v.retry_at = e.retry_at;
      v.reason = e.reason;
    } else if (e.health == Health::kChecking) {
      v.state = MachineState::kChecking;
      v.reason = e.reason;
    } else {
      v.state = v.used_slots > 0 ? MachineState::kInUse : MachineState::kIdle;
    }
    views.push_back(std::move(v));
  }
  return views;
}

MachinePool::Entry* MachinePool::FindEntry(const std::string& address) {
  for (Entry& e : entries_) {
    if (e.machine.Address() == address) return &e;
  }
  return nullptr;
}

const MachinePool::Entry* MachinePool::FindEntry(const std::string& address) const {
  return const_cast<MachinePool*>(this)->FindEntry(address);
}

double MachinePool::Backoff(int n) const {
  return std::min(options_.backoff_max_s, options_.backoff_base_s * std::pow(2.0, std::max(0, n - 1)));
}

}  // namespace mitra::manager
