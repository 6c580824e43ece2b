#include "run/orphans.h"

#include "common/json.h"
#include "common/strings.h"
#include "manager/machine_list.h"
#include "records/reader.h"

namespace mitra::run {

int KillOrphans(FileSystem& fs, const RunDir& run_dir, Transports& transports, std::ostream& out) {
  const std::optional<JsonObject> state = records::RunDirReader(&fs, run_dir.path()).StateJson();
  if (!state) return 0;
  if (records::State::IsEnd(records::FromJson<records::State>(*state).state)) return 0;
  const JsonValue* workers = state->Find("workers");
  if (workers == nullptr || workers->type() != JsonValue::Type::kRaw) return 0;
  Result<JsonObject> listed = JsonObject::Parse(workers->string_value());
  if (!listed.ok()) return 0;

  int count = 0;
  for (const auto& [rank, value] : listed->fields()) {
    // "ADDRESS PID", ADDRESS as a machine list writes it.
    const std::string& entry = value.string_value();
    const size_t space = entry.rfind(' ');
    if (space == std::string::npos) continue;
    const std::optional<int64_t> pid = ParseInt64(entry.substr(space + 1));
    Result<manager::MachineList> machine = manager::ParseMachineList(entry.substr(0, space), "state.json", 1);
    if (!pid || !machine.ok() || machine->machines.size() != 1) continue;
    ++count;
    const manager::Machine& m = machine->machines[0];
    const Status s = transports.KillOrphan(m, *pid, run_dir.path());
    if (s.ok()) {
      out << "mitra: rank " << rank << " of the previous manager (pid " << *pid << " on "
          << m.Address() << ") is gone" << std::endl;
    } else {
      out << "mitra: warning: could not stop rank " << rank << " (pid " << *pid << " on "
          << m.Address() << ") of the previous manager: " << s.message()
          << "; stop it by hand if it still runs" << std::endl;
    }
  }
  return count;
}

}  // namespace mitra::run
