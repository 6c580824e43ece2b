#include "manager/machine_list.h"

#include <gtest/gtest.h>

namespace mitra::manager {
namespace {

MachineList ParseOk(const std::string& text, int default_slots = 1) {
  Result<MachineList> list = ParseMachineList(text, "machines.txt", default_slots);
  EXPECT_TRUE(list.ok()) << list.status().message();
  return list.ok() ? *list : MachineList{};
}

std::string ParseError(const std::string& text) {
  Result<MachineList> list = ParseMachineList(text, "machines.txt", 1);
  EXPECT_FALSE(list.ok()) << "accepted: " << text;
  if (!list.ok()) {
    EXPECT_EQ(list.status().code(), Status::Code::kInvalidArgument);
  }
  return list.ok() ? "" : list.status().message();
}

TEST(MachineList, ParsesTheDesignExample) {
  const MachineList list = ParseOk(
      "# one machine per line; '#' starts a comment\n"
      "localhost slots=2            # local processes, no SSH\n"
      "10.0.0.7 slots=4\n"
      "alice@node12:2222 slots=8    # user, port\n");
  ASSERT_EQ(list.machines.size(), 3u);
  EXPECT_EQ(list.machines[0].host, "localhost");
  EXPECT_EQ(list.machines[0].slots, 2);
  EXPECT_EQ(list.machines[0].line, 2);
  EXPECT_TRUE(list.machines[0].IsLocal());
  EXPECT_EQ(list.machines[1].host, "10.0.0.7");
  EXPECT_EQ(list.machines[1].port, 0);
  EXPECT_FALSE(list.machines[1].IsLocal());
  EXPECT_EQ(list.machines[2].user, "alice");
  EXPECT_EQ(list.machines[2].host, "node12");
  EXPECT_EQ(list.machines[2].port, 2222);
  EXPECT_EQ(list.machines[2].slots, 8);
  EXPECT_EQ(list.machines[2].Address(), "alice@node12:2222");
  EXPECT_EQ(list.TotalSlots(), 14);
}

TEST(MachineList, BareHostsTakeTheDefaultSlots) {
  const MachineList list = ParseOk("node1\nnode2 slots=3\n\n   \n", /*default_slots=*/4);
  ASSERT_EQ(list.machines.size(), 2u);
  EXPECT_EQ(list.machines[0].slots, 4);
  EXPECT_EQ(list.machines[1].slots, 3);
}

TEST(MachineList, AcceptsIpv6InBracketsAndCrlfLines) {
  const MachineList list = ParseOk("[fe80::1]:2222 slots=2\r\n127.0.0.1\r\n");
  ASSERT_EQ(list.machines.size(), 2u);
  EXPECT_EQ(list.machines[0].host, "fe80::1");
  EXPECT_EQ(list.machines[0].Address(), "[fe80::1]:2222");
  EXPECT_TRUE(list.machines[1].IsLocal());
}

TEST(MachineList, LocalhostWithUserOrPortMeansSsh) {
  const MachineList list = ParseOk("bob@localhost\nlocalhost:2222\n");
  EXPECT_FALSE(list.machines[0].IsLocal());
  EXPECT_FALSE(list.machines[1].IsLocal());
}

TEST(MachineList, ReportsABadHostWithFileAndLine) {
  EXPECT_EQ(ParseError("localhost\n\n# c\n\n\n\nnode 4\n"),
            "machines.txt:7: 'node 4' is not a host name (expected [user@]host[:port] "
            "[slots=N] [drain])");
}

TEST(MachineList, TheWordDrainMarksAMachine) {
  Result<MachineList> list =
      ParseMachineList("a slots=2 drain\nb drain slots=3\nc\n", "machines.txt", 1);
  ASSERT_TRUE(list.ok()) << list.status().message();
  EXPECT_TRUE(list->machines[0].drain);
  EXPECT_EQ(list->machines[0].slots, 2);
  EXPECT_TRUE(list->machines[1].drain);
  EXPECT_EQ(list->machines[1].slots, 3);
  EXPECT_FALSE(list->machines[2].drain);
  EXPECT_NE(ParseError("a drain drain\n").find("machines.txt:1: drain is given twice"),
            std::string::npos);
  EXPECT_NE(ParseError("a drain=yes\n").find("a machine takes slots=N and the word drain"),
            std::string::npos)
      << ParseError("a drain=yes\n");
}

TEST(MachineList, RejectsShellMetacharacters) {
  for (const char* bad : {"node;rm", "node$(id)", "`id`", "node|x", "node&", "a>b", "node'x",
                          "node\"x", "no\\de", "node*", "-oProxyCommand=x"}) {
    const std::string message = ParseError(std::string(bad) + "\n");
    EXPECT_NE(message.find("machines.txt:1: "), std::string::npos) << message;
  }
  EXPECT_NE(ParseError("node;rm -rf /\n").find("'node;rm -rf /' is not a host name"),
            std::string::npos);
}

// Found by fuzz/machine_list_fuzz.cc: inet_pton stopped at the NUL and saw "::".
TEST(MachineList, RejectsAnIpv6AddressWithANulByte) {
  EXPECT_FALSE(IsValidIpv6(std::string("::\0", 3)));
  EXPECT_FALSE(IsValidIpv6(std::string("::1\0node", 8)));
  EXPECT_NE(ParseError(std::string("[::\0]\n", 6)).find("machines.txt:1: "), std::string::npos);
  EXPECT_TRUE(IsValidIpv6("::ffff:10.0.0.7"));
}

TEST(MachineList, RejectsBadUsersPortsAndSlots) {
  EXPECT_NE(ParseError("b$d@node\n").find("'b$d' in 'b$d@node' is not a user name"),
            std::string::npos);
  EXPECT_NE(ParseError("a@b@node\n").find("machines.txt:1:"), std::string::npos);
  EXPECT_NE(ParseError("node:0\n").find("port '0' in 'node:0' is not a port number"),
            std::string::npos);
  EXPECT_NE(ParseError("node:65536\n").find("is not a port number"), std::string::npos);
  EXPECT_NE(ParseError("node:\n").find("empty port"), std::string::npos);
  EXPECT_NE(ParseError("node slots=0\n").find("'slots=0' is not a slot count"), std::string::npos);
  EXPECT_NE(ParseError("node slots=two\n").find("'slots=two' is not a slot count"),
            std::string::npos);
  EXPECT_NE(ParseError("node slots=1 slots=2\n").find("slots= is given twice"), std::string::npos);
  EXPECT_NE(ParseError("node gpus=2\n").find("unknown setting 'gpus=2'"), std::string::npos);
  for (const char* spaced : {"node slots= 2\n", "node slots =2\n", "node slots = 2 drain\n"}) {
    EXPECT_NE(ParseError(spaced).find("has a space around '=': write slots=N"), std::string::npos)
        << ParseError(spaced);
  }
  EXPECT_NE(ParseError("fe80::1\n").find("brackets"), std::string::npos);
  EXPECT_NE(ParseError("10.0.0.300\n").find("not a host name"), std::string::npos);
}

TEST(MachineList, ReportsEveryBadLineAtOnce) {
  const std::string message = ParseError("bad host\nlocalhost\nnode slots=0\n");
  EXPECT_NE(message.find("machines.txt:1:"), std::string::npos);
  EXPECT_NE(message.find("\nmachines.txt:3:"), std::string::npos);
}

TEST(MachineList, RejectsDuplicates) {
  EXPECT_EQ(ParseError("node1 slots=2\nNODE1 slots=2\n"),
            "machines.txt:2: 'NODE1' is already listed on line 1; list each machine once, "
            "with all its slots");
  EXPECT_NE(ParseError("localhost\n127.0.0.1\n").find("already listed on line 1"),
            std::string::npos);
  ParseOk("node1:22\nnode1:2222\n");  // two ports: two machines (e.g. containers)
}

TEST(MachineList, AnEmptyListIsAnError) {
  EXPECT_EQ(ParseError("# nothing here\n\n"),
            "machines.txt: lists no machines; add a line such as `localhost slots=2`");
}

TEST(MachineList, ValidatesNames) {
  EXPECT_TRUE(IsValidHostName("node-12.example.com"));
  EXPECT_TRUE(IsValidHostName("10.0.0.7"));
  EXPECT_FALSE(IsValidHostName("-node"));
  EXPECT_FALSE(IsValidHostName("node-"));
  EXPECT_FALSE(IsValidHostName("a..b"));
  EXPECT_FALSE(IsValidHostName(std::string(64, 'a')));
  EXPECT_TRUE(IsValidIpv6("::1"));
  EXPECT_FALSE(IsValidIpv6("::g"));
  EXPECT_TRUE(IsValidUserName("alice_b.c-d"));
  EXPECT_FALSE(IsValidUserName("9lives"));
  EXPECT_FALSE(IsValidUserName("a b"));
}

}  // namespace
}  // namespace mitra::manager
