#include "run/slurm_allocation.h"

#include <gtest/gtest.h>

namespace mitra::run {
namespace {

TEST(SlurmCounts, ReadsTheCompressedForm) {
  EXPECT_EQ(*ParseSlurmCounts("2(x3),1", "V"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(*ParseSlurmCounts("4", "V"), (std::vector<int>{4}));
  EXPECT_EQ(*ParseSlurmCounts("8(x2)", "V"), (std::vector<int>{8, 8}));
  EXPECT_EQ(*ParseSlurmCounts("1,3(x2),2", "V"), (std::vector<int>{1, 3, 3, 2}));
}

TEST(SlurmCounts, RefusesWhatIsNotACountNamingTheVariable) {
  for (const char* bad : {"", "0", "a", "2(x)", "2(y3)", "2(x3", "2(x0)", "2,,1", "-1", "1025"}) {
    Result<std::vector<int>> counts = ParseSlurmCounts(bad, "SLURM_TASKS_PER_NODE");
    ASSERT_FALSE(counts.ok()) << "'" << bad << "'";
    EXPECT_EQ(counts.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(counts.status().message().find("SLURM_TASKS_PER_NODE='"), std::string::npos)
        << counts.status().message();
  }
}

class SlurmMachines : public ::testing::Test {
 protected:
  Result<manager::MachineList> List(int slots_per_node = 0) {
    return SlurmMachineList(environment_, slots_per_node, [this](const std::string& list) {
      asked_.push_back(list);
      return Result<std::vector<std::string>>(hosts_);
    });
  }

  Environment environment_{{"SLURM_JOB_NODELIST", "gpu[01-03],cpu7"},
                           {"SLURM_TASKS_PER_NODE", "4(x3),2"},
                           {"SLURM_JOB_CPUS_PER_NODE", "64(x4)"}};
  std::vector<std::string> hosts_{"gpu01", "gpu02", "gpu03", "cpu7"};
  std::vector<std::string> asked_;
};

TEST_F(SlurmMachines, EachNodeOnceWithItsTasksAsSlots) {
  Result<manager::MachineList> list = List();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(asked_, (std::vector<std::string>{"gpu[01-03],cpu7"}));
  ASSERT_EQ(list->machines.size(), 4u);
  EXPECT_EQ(list->machines[0].Address(), "gpu01");
  EXPECT_EQ(list->machines[3].Address(), "cpu7");
  EXPECT_EQ(list->machines[0].slots, 4);
  EXPECT_EQ(list->machines[3].slots, 2);
  EXPECT_EQ(list->TotalSlots(), 14);
  EXPECT_FALSE(list->machines[0].IsLocal());
}

TEST_F(SlurmMachines, GpusPerNodeGivenIsEveryNodesSlots) {
  Result<manager::MachineList> list = List(8);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->TotalSlots(), 32);
  environment_.erase("SLURM_TASKS_PER_NODE");
  EXPECT_TRUE(List(8).ok()) << "tasks are not needed then";
}

TEST_F(SlurmMachines, OutsideAnAllocationIsRefusedNamingTheFix) {
  environment_.erase("SLURM_JOB_NODELIST");
  Result<manager::MachineList> list = List();
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(list.status().message().find("SLURM_JOB_NODELIST is not set"), std::string::npos);
  EXPECT_NE(list.status().message().find("salloc"), std::string::npos);
  EXPECT_TRUE(asked_.empty());
}

TEST_F(SlurmMachines, TasksThatDoNotMatchTheNodesAreRefused) {
  environment_["SLURM_TASKS_PER_NODE"] = "4(x2)";
  Result<manager::MachineList> list = List();
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.status().message().find("counts 2 nodes"), std::string::npos)
      << list.status().message();
  EXPECT_NE(list.status().message().find("--gpus-per-node"), std::string::npos);
  environment_.erase("SLURM_TASKS_PER_NODE");
  EXPECT_NE(List().status().message().find("--ntasks-per-node"), std::string::npos);
}

TEST_F(SlurmMachines, ANodeNameThatIsNotAHostNameIsRefused) {
  hosts_[1] = "gpu 02";
  Result<manager::MachineList> list = List();
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.status().message().find("'gpu 02'"), std::string::npos);
}

TEST_F(SlurmMachines, AnExpansionThatFailsIsPassedOn) {
  Result<manager::MachineList> list = SlurmMachineList(environment_, 0, [](const std::string&) {
    return Result<std::vector<std::string>>(Status::InvalidArgument("scontrol: no such list"));
  });
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().message(), "scontrol: no such list");
}

}  // namespace
}  // namespace mitra::run
