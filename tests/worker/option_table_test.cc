// The one table of a training program's options (worker/option_table.h): each row reads and
// writes the member it names, names and flags are spelled once, and a value out of its range or
// of another type is refused saying what to give. The flags made from it are tested as the
// example programs run (trainer_flags_test.cc), the Python keywords in tests/python.
#include "worker/option_table.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace mitra::worker {
namespace {

// A value of the row's type that is not `was`: what a test sets to see it arrive.
OptionValue Another(const TrainerOption& o, const OptionValue& was) {
  switch (o.type) {
    case OptionType::kWhole: {
      const int64_t n = std::get<int64_t>(was);
      return n < o.max ? n + 1 : n - 1;
    }
    case OptionType::kNumber:
      return std::get<double>(was) + 0.25;
    case OptionType::kSwitch:
      return !std::get<bool>(was);
    case OptionType::kPair:
      return std::make_pair(0.5, 0.75);
    case OptionType::kText:
      return std::string("elsewhere");
    case OptionType::kName:
      break;
    case OptionType::kObject:
      break;
  }
  // A name of the setting's that is not the default (a CPU build has one backend only).
  if (o.name == "backend") return std::string(ParseBackend("nccl").ok() ? "nccl" : "gloo");
  static const std::map<std::string, std::string> kOther = {
      {"schedule", "gpipe"}, {"partition", "params"}, {"precision", "bf16"},
      {"device", "cuda"},    {"optimizer", "sgd"},    {"sampler", "sequential"}};
  return kOther.at(o.name);
}

TEST(OptionTable, NamesAndFlagsAreEachSpelledOnce) {
  std::set<std::string> names, flags;
  for (const TrainerOption& o : TrainerOptionTable()) {
    EXPECT_TRUE(names.insert(o.name).second) << o.name;
    EXPECT_EQ(FindTrainerOption(o.name), &o);
    if (o.flag.empty()) continue;
    EXPECT_TRUE(flags.insert(o.flag).second) << o.flag;
    EXPECT_EQ(o.flag.rfind("--", 0), 0u) << o.flag;
  }
  EXPECT_EQ(FindTrainerOption("batchsize"), nullptr);
}

// Every row with a value writes what it reads: a value other than the default, set, is what
// the row reads back, and it changes nothing another row reads.
TEST(OptionTable, EachRowWritesTheMemberItReads) {
  const TrainerOptions defaults;
  for (const TrainerOption& o : TrainerOptionTable()) {
    if (o.type == OptionType::kObject) {
      EXPECT_FALSE(o.get || o.set || !o.flag.empty()) << o.name << ": an object has no value";
      continue;
    }
    ASSERT_TRUE(o.get && o.set) << o.name;
    const std::optional<OptionValue> was = o.get(defaults);
    const OptionValue now =
        was ? Another(o, *was)
            : (o.type == OptionType::kNumber ? OptionValue(4.0) : OptionValue(std::string("x")));
    TrainerOptions options;
    ASSERT_TRUE(SetTrainerOption(o, now, options).ok()) << o.name;
    EXPECT_EQ(o.get(options), now) << o.name;
    for (const TrainerOption& other : TrainerOptionTable()) {
      if (&other == &o || !other.get) continue;
      EXPECT_EQ(other.get(options), other.get(defaults)) << o.name << " changed " << other.name;
    }
  }
}

// The rows reach the members the runtime reads (a few, by hand: the rest follow the pattern).
TEST(OptionTable, RowsReachTheRuntimesMembers) {
  TrainerOptions options;
  ASSERT_TRUE(SetTrainerOption(*FindTrainerOption("batch_size"), int64_t{96}, options).ok());
  ASSERT_TRUE(SetTrainerOption(*FindTrainerOption("max_steps"), int64_t{7}, options).ok());
  ASSERT_TRUE(SetTrainerOption(*FindTrainerOption("checkpoint_every"), int64_t{5}, options).ok());
  ASSERT_TRUE(SetTrainerOption(*FindTrainerOption("loss_scale"), 1024.0, options).ok());
  ASSERT_TRUE(
      SetTrainerOption(*FindTrainerOption("betas"), std::make_pair(0.8, 0.95), options).ok());
  ASSERT_TRUE(SetTrainerOption(*FindTrainerOption("schedule"), std::string("zb-v"), options).ok());
  EXPECT_EQ(options.runtime.global_batch, 96);
  EXPECT_EQ(options.max_steps, 7);
  EXPECT_EQ(options.checkpoint.every, 5);
  EXPECT_TRUE(options.runtime.loss_scaler.enabled);
  EXPECT_EQ(options.runtime.loss_scaler.initial_scale, 1024.0);
  EXPECT_EQ(options.runtime.optimizer.beta1, 0.8);
  EXPECT_EQ(options.runtime.optimizer.beta2, 0.95);
  EXPECT_EQ(options.runtime.schedule, planner::ScheduleKind::kZbV);
  // A loss scale not given reads as none: it is off.
  EXPECT_EQ(FindTrainerOption("loss_scale")->get(TrainerOptions{}), std::nullopt);
}

TEST(OptionTable, ValuesOutOfRangeOrOfAnotherTypeAreRefusedSayingWhatToGive) {
  struct Case {
    const char* name;
    OptionValue value;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"batch_size", int64_t{0}, "'0' is not a whole number >= 1"},
      {"zero", int64_t{2}, "'2' is not a whole number from 0 to 1"},
      {"chunk_size", int64_t{1} << 31, "'2147483648' is not a whole number from 1 to 1073741824"},
      {"lr", -1.0, "'-1' is not a number >= 0"},
      {"loss_scale", 0.5, "'0.5' is not a number >= 1"},
      {"batch_size", 3.5, "'3.5' is not a whole number >= 1"},
      {"recompute", int64_t{1}, "'1' is not true or false"},
      {"schedule", std::string("zb-x"), "unknown schedule 'zb-x' (expected gpipe, 1f1b"},
      {"checkpoint_dir", std::string(""), "needs a value that is not empty"},
      {"betas", 0.9, "'0.9' is not two numbers"},
  };
  for (const Case& c : cases) {
    TrainerOptions options;
    const Status s = SetTrainerOption(*FindTrainerOption(c.name), c.value, options);
    EXPECT_FALSE(s.ok()) << c.name;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.name << ": " << s.message();
  }
  // Nothing refused was stored.
  TrainerOptions options;
  (void)SetTrainerOption(*FindTrainerOption("zero"), int64_t{2}, options);
  EXPECT_EQ(options.runtime.zero, 0);
}

}  // namespace
}  // namespace mitra::worker
