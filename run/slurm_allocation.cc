#include "run/slurm_allocation.h"

#include "common/strings.h"
#include "launcher/local_command.h"

namespace mitra::run {
namespace {

constexpr int kMaxSlots = 1024;  // as a machine list line's slots=N

std::string Value(const Environment& environment, const std::string& name) {
  const auto it = environment.find(name);
  return it == environment.end() ? "" : std::string(Trim(it->second));
}

}  // namespace

Result<std::vector<int>> ParseSlurmCounts(std::string_view text, std::string_view variable) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(std::string(variable) + "='" + std::string(text) + "' " + why +
                                   " (expected counts such as 2(x3),1)");
  };
  std::vector<int> counts;
  if (Trim(text).empty()) return bad("is empty");
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = Trim(text.substr(begin, end - begin));
    begin = end + 1;
    int64_t repeat = 1;
    const size_t open = item.find('(');
    if (open != std::string_view::npos) {
      const std::string_view times = item.substr(open);
      if (times.size() < 4 || times.substr(0, 2) != "(x" || times.back() != ')') {
        return bad("has '" + std::string(item) + "', not N or N(xR)");
      }
      const std::optional<int64_t> r = ParseInt64(times.substr(2, times.size() - 3));
      if (!r || *r < 1 || *r > 100000) return bad("repeats '" + std::string(item) + "' oddly");
      repeat = *r;
      item = item.substr(0, open);
    }
    const std::optional<int64_t> n = ParseInt64(item);
    if (!n || *n < 1 || *n > kMaxSlots) {
      return bad("has '" + std::string(item) + "', not a count from 1 to " +
                 std::to_string(kMaxSlots));
    }
    counts.insert(counts.end(), static_cast<size_t>(repeat), static_cast<int>(*n));
  }
  return counts;
}

Result<std::vector<std::string>> ExpandWithScontrol(const std::string& host_list,
                                                    const Environment& environment) {
  Result<launcher::CommandResult> result =
      launcher::RunLocalCommand({"scontrol", "show", "hostnames", host_list}, environment, 30);
  if (!result.ok()) {
    return Status::InvalidArgument(
        "cannot expand SLURM_JOB_NODELIST with scontrol: " + result.status().message() +
        " (Debian: apt-get install slurm-client)");
  }
  if (!result->ok()) {
    return Status::InvalidArgument("`scontrol show hostnames " + host_list +
                                   "` failed: " + std::string(Trim(result->err)));
  }
  std::vector<std::string> hosts;
  for (const std::string_view line : SplitLines(result->out)) {
    if (!Trim(line).empty()) hosts.emplace_back(Trim(line));
  }
  return hosts;
}

Result<manager::MachineList> SlurmMachineList(const Environment& environment, int slots_per_node,
                                     const HostListExpander& expand) {
  const std::string node_list = Value(environment, "SLURM_JOB_NODELIST");
  if (node_list.empty()) {
    return Status::InvalidArgument(
        "--machines slurm takes the machines of the Slurm allocation mitra runs in, and "
        "SLURM_JOB_NODELIST is not set: run it inside one (in an sbatch script, or "
        "`salloc --nodes=2 --ntasks-per-node=4 mitra run ...`), or give a machine list file");
  }
  Result<std::vector<std::string>> hosts = expand(node_list);
  if (!hosts.ok()) return hosts.status();
  if (hosts->empty()) {
    return Status::InvalidArgument("SLURM_JOB_NODELIST='" + node_list + "' names no node");
  }
  std::vector<int> slots(hosts->size(), slots_per_node);
  if (slots_per_node <= 0) {
    const std::string tasks = Value(environment, "SLURM_TASKS_PER_NODE");
    if (tasks.empty()) {
      return Status::InvalidArgument(
          "--machines slurm takes the slots of each node from SLURM_TASKS_PER_NODE, which is "
          "not set: allocate with --ntasks-per-node=N, or pass --gpus-per-node N");
    }
    Result<std::vector<int>> counts = ParseSlurmCounts(tasks, "SLURM_TASKS_PER_NODE");
    if (!counts.ok()) return counts.status();
    if (counts->size() != hosts->size()) {
      return Status::InvalidArgument(
          "SLURM_TASKS_PER_NODE='" + tasks + "' counts " + std::to_string(counts->size()) +
          " nodes but " + "SLURM_JOB_NODELIST='" + node_list + "' has " +
          std::to_string(hosts->size()) + "; pass --gpus-per-node N to give every node N slots");
    }
    slots = std::move(counts).value();
  }
  manager::MachineList list;
  for (size_t i = 0; i < hosts->size(); ++i) {
    if (!manager::IsValidHostName((*hosts)[i])) {
      return Status::InvalidArgument("Slurm node '" + (*hosts)[i] +
                                     "' is not a host name mitra can reach (letters, digits, "
                                     "'-' and '.')");
    }
    manager::Machine m;
    m.host = (*hosts)[i];
    m.slots = slots[i];
    m.line = static_cast<int>(i) + 1;
    list.machines.push_back(std::move(m));
  }
  return list;
}

}  // namespace mitra::run
