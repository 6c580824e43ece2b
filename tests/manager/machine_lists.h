// A machine list from its text, for the manager's unit tests (the text must parse).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "manager/machine_list.h"

namespace mitra::testing {

inline manager::MachineList List(const std::string& text) {
  Result<manager::MachineList> list = manager::ParseMachineList(text, "machines.txt", 1);
  EXPECT_TRUE(list.ok()) << list.status().message();
  return list.ok() ? *list : manager::MachineList{};
}

}  // namespace mitra::testing
