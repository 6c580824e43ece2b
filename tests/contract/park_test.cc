// The lines a parked worker is sent: a placement round-trips through one, the exit order is
// understood, and anything else is refused with what was wrong.
#include "contract/park.h"

#include <gtest/gtest.h>

namespace mitra::contract {
namespace {

TEST(ParkLine, APlacementRoundTripsWithOnlyTheContractsVariables) {
  Placement p;
  p.rank = 2;
  p.stage_map = StageMap::Default(2, 2);
  p.rdzv_port = 29501;
  p.generation = 3;
  p.resume_step = 40;
  p.run_dir = "/runs/a \"quoted\"";
  p.park = true;
  p.job_token = std::string(64, 'e');  // the job's secret goes with the placement, on stdin
  Environment env = p.ToEnvironment();
  env["PATH"] = "/usr/bin";  // the process's own environment stays as it is
  const std::string line = PlacementLine(env);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.find("PATH"), std::string::npos) << line;

  Result<ParkOrder> order = ParseParkLine(line);
  ASSERT_TRUE(order.ok()) << order.status().message();
  ASSERT_TRUE(order->placement.has_value());
  Result<Placement> back = Placement::FromEnvironment(*order->placement);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->rank, 2);
  EXPECT_EQ(back->generation, 3);
  EXPECT_EQ(back->resume_step, 40);
  EXPECT_EQ(back->rdzv_port, 29501);
  EXPECT_EQ(back->run_dir, "/runs/a \"quoted\"");
  EXPECT_TRUE(back->park);
  EXPECT_EQ(back->stage_map.ToString(), p.stage_map.ToString());
  EXPECT_EQ(back->job_token, p.job_token);
}

TEST(ParkLine, TheExitOrderHasNoPlacement) {
  Result<ParkOrder> order = ParseParkLine(ExitLine());
  ASSERT_TRUE(order.ok());
  EXPECT_FALSE(order->placement.has_value());
}

TEST(ParkLine, AnythingElseIsRefusedSayingWhy) {
  for (const char* line : {"", "go", "{\"placement\":3}", "{\"exit\":false}", "[1]",
                           "{\"placement\":{\"HOME\":\"/root\"}}",
                           "{\"placement\":{\"MITRA_RANK\":2}}"}) {
    Result<ParkOrder> order = ParseParkLine(line);
    ASSERT_FALSE(order.ok()) << line;
    EXPECT_EQ(order.status().code(), Status::Code::kInvalidArgument) << line;
    EXPECT_NE(order.status().message().find("parked worker"), std::string::npos)
        << order.status().message();
  }
}

TEST(ParkLine, ParkIsReadAsZeroOrOne) {
  Placement p;
  p.stage_map = StageMap::Default(1, 1);
  p.rdzv_port = 1;
  p.job_token = std::string(64, 'e');
  Environment env = p.ToEnvironment();
  EXPECT_EQ(env.count("MITRA_PARK"), 0u);
  EXPECT_FALSE(Placement::FromEnvironment(env)->park);
  env["MITRA_PARK"] = "yes";
  Result<Placement> bad = Placement::FromEnvironment(env);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("MITRA_PARK='yes' is not 0 or 1"), std::string::npos);
}

}  // namespace
}  // namespace mitra::contract
