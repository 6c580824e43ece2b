// Reading the machine list file (run/machine_list_file.h): once, its text kept, and a file that
// is not there or not a list named with its fix.
#include "run/machine_list_file.h"

#include <gtest/gtest.h>

#include "tests/common/memory_file_system.h"

namespace mitra::run {
namespace {

TEST(MachineListFile, IsReadOnceWithItsText) {
  testing::MemoryFileSystem fs;
  fs.AddFile("machines.txt", "localhost slots=2\n127.0.0.2\n");
  Result<MachineListFile> file = ReadMachineList(fs, "machines.txt", 3);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->text, "localhost slots=2\n127.0.0.2\n");
  ASSERT_EQ(file->list.machines.size(), 2u);
  EXPECT_EQ(file->list.machines[1].slots, 3) << "the default slots";
}

TEST(MachineListFile, AMissingOrBadListIsNamedWithItsFix) {
  testing::MemoryFileSystem fs;
  Result<MachineListFile> missing = ReadMachineList(fs, "machines.txt", 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "machine list machines.txt does not exist; create it (e.g. one line: localhost "
            "slots=2) or fix --machines");
  fs.AddFile("machines.txt", "node 4\n");
  Result<MachineListFile> bad = ReadMachineList(fs, "machines.txt", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("machines.txt:1: ", 0), 0u) << bad.status().message();
}

}  // namespace
}  // namespace mitra::run
