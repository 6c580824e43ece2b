#include "run/machine_list_file.h"

#include <utility>

namespace mitra::run {

Result<MachineListFile> ReadMachineList(FileSystem& fs, const std::string& path,
                                        int default_slots) {
  Result<std::string> text = fs.ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == Status::Code::kNotFound) {
      return Status::InvalidArgument("machine list " + path +
                                     " does not exist; create it (e.g. one line: localhost "
                                     "slots=2) or fix --machines");
    }
    return Status::InvalidArgument("cannot read machine list: " + text.status().message());
  }
  Result<manager::MachineList> list = manager::ParseMachineList(*text, path, default_slots);
  if (!list.ok()) return list.status();
  return MachineListFile{std::move(text).value(), std::move(list).value()};
}

}  // namespace mitra::run
