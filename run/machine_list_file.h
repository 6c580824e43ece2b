// The machine list file, read once: its text (the watcher's first contents) and its machines.
// manager/machine_list.h parses; the manager makes no OS calls, so the reading is here.
#pragma once

#include <string>

#include "common/file_system.h"
#include "manager/machine_list.h"
#include "mitra/common/status.h"

namespace mitra::run {

struct MachineListFile {
  std::string text;
  manager::MachineList list;
};

// Reads and parses the file at `path` (messages name it as given). InvalidArgument naming the
// fix for a file that does not exist or cannot be read, or naming every bad line.
Result<MachineListFile> ReadMachineList(FileSystem& fs, const std::string& path,
                                        int default_slots);

}  // namespace mitra::run
