// The command-line layer every mitra command uses (flags.h), and the commands that use it
// besides `mitra run` (run_options_test.cc): plan, profile.
#include "cli/flags.h"

#include <gtest/gtest.h>

#include "cli/planner_commands.h"

namespace mitra::cli {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A command `mitra demo` with one flag of each kind and a program.
struct Demo {
  std::string path;
  int64_t count = 0;
  int small = 0;
  double seconds = 0;
  std::vector<int64_t> sizes;
  std::vector<std::pair<std::string, std::string>> env;
  bool json = false;
  std::string program;
  std::vector<std::string> program_args;
  bool help = false;

  Status Parse(const std::vector<std::string>& args, bool with_program = true) {
    Flags flags("demo");
    flags.Text("--path", &path, "a file name", "a.txt");
    flags.Whole("--count", 0, &count, "3", 100);
    flags.Whole("--small", 1, &small, "2");
    flags.Seconds("--seconds", &seconds, "30");
    flags.Wholes("--sizes", &sizes, "1,2,4");
    flags.Environment("--env", &env);
    flags.Switch("--json", &json);
    if (with_program) flags.Program(&program, &program_args, "mitra demo -- ./train");
    Status s = flags.Parse(args);
    help = flags.help();
    if (s.ok() && with_program && !help) s = flags.CheckProgram();
    return s;
  }

  std::string Error(const std::vector<std::string>& args, bool with_program = true) {
    const Status s = Parse(args, with_program);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
    return s.message();
  }
};

TEST(Flags, ReadsEachKindOfValueEitherWay) {
  Demo d;
  ASSERT_TRUE(d.Parse({"--path", "p.txt", "--count=7", "--small", "3", "--seconds=0.5", "--sizes",
                       "4,1 2,4", "--env", "A=1", "--env=B_2=x=y", "--json", "--", "prog"})
                  .ok());
  EXPECT_EQ(d.path, "p.txt");
  EXPECT_EQ(d.count, 7);
  EXPECT_EQ(d.small, 3);
  EXPECT_EQ(d.seconds, 0.5);
  EXPECT_EQ(d.sizes, (std::vector<int64_t>{1, 2, 4}));
  ASSERT_EQ(d.env.size(), 2u);
  EXPECT_EQ(d.env[1], std::make_pair(std::string("B_2"), std::string("x=y")));
  EXPECT_TRUE(d.json);
  EXPECT_EQ(d.program, "prog");
}

TEST(Flags, ARepeatedFlagKeepsItsLastValue) {
  Demo d;
  ASSERT_TRUE(d.Parse({"--count", "1", "--count", "2", "--", "p"}).ok());
  EXPECT_EQ(d.count, 2);
}

TEST(Flags, EverythingAfterTheSeparatorIsTheProgramsEvenMitrasFlags) {
  Demo d;
  ASSERT_TRUE(d.Parse({"--count", "1", "--", "./train", "--count", "x", "--help", "--", "-h",
                       "--unknown", "--path="})
                  .ok());
  EXPECT_EQ(d.count, 1);
  EXPECT_FALSE(d.help);
  EXPECT_EQ(d.program, "./train");
  EXPECT_EQ(d.program_args, (std::vector<std::string>{"--count", "x", "--help", "--", "-h",
                                                      "--unknown", "--path="}));
}

TEST(Flags, AProgramIsRequiredWhereTheCommandTakesOne) {
  Demo d;
  EXPECT_EQ(d.Error({"--count", "1"}),
            "mitra demo: no program given; end the command with `-- PROGRAM [ARGS...]`, e.g. "
            "mitra demo -- ./train");
  EXPECT_TRUE(Contains(d.Error({"--"}), "mitra demo: no program after `--`"));
  EXPECT_EQ(d.Error({"./train", "--", "p"}),
            "mitra demo: unexpected argument './train'; put the program and its arguments after "
            "`--`, e.g. mitra demo -- ./train");
}

TEST(Flags, ACommandWithoutAProgramRefusesTheSeparatorAndWords) {
  Demo d;
  EXPECT_EQ(d.Error({"--", "p"}, false), "mitra demo: takes no program; see `mitra demo --help`");
  EXPECT_EQ(d.Error({"extra"}, false),
            "mitra demo: unexpected argument 'extra'; see `mitra demo --help`");
}

TEST(Flags, UnknownFlagsSuggestTheNearestKnownOne) {
  Demo d;
  EXPECT_EQ(d.Error({"--cont", "3", "--", "p"}),
            "mitra demo: unknown flag '--cont'; did you mean --count? See `mitra demo --help`");
  EXPECT_EQ(d.Error({"--siz=1", "--", "p"}),  // a truncation
            "mitra demo: unknown flag '--siz'; did you mean --sizes? See `mitra demo --help`");
  EXPECT_EQ(d.Error({"--frobnicate", "--", "p"}),
            "mitra demo: unknown flag '--frobnicate'; see `mitra demo --help`");
  EXPECT_EQ(d.Error({"-x", "--", "p"}), "mitra demo: unknown flag '-x'; see `mitra demo --help`");
}

TEST(Flags, BadValuesNameTheFlagTheValueAndAGoodOne) {
  Demo d;
  EXPECT_EQ(d.Error({"--small", "abc", "--", "p"}),
            "mitra demo: --small 'abc' is not a whole number >= 1 (e.g. --small 2)");
  EXPECT_EQ(d.Error({"--small", "-1", "--", "p"}),
            "mitra demo: --small '-1' is not a whole number >= 1 (e.g. --small 2)");
  EXPECT_EQ(d.Error({"--count", "101", "--", "p"}),
            "mitra demo: --count '101' is not a whole number from 0 to 100 (e.g. --count 3)");
  EXPECT_TRUE(Contains(d.Error({"--small", "99999999999", "--", "p"}),
                       "--small '99999999999' is not a whole number from 1 to 1073741824"));
  EXPECT_EQ(d.Error({"--seconds", "0", "--", "p"}),
            "mitra demo: --seconds '0' is not a positive number of seconds (e.g. --seconds 30)");
  EXPECT_TRUE(Contains(d.Error({"--sizes", "1,x", "--", "p"}),
                       "--sizes '1,x' is not a list of whole numbers >= 1 (e.g. --sizes 1,2,4)"));
  EXPECT_TRUE(Contains(d.Error({"--env", "1X=2", "--", "p"}), "--env '1X=2' is not KEY=VALUE"));
  EXPECT_TRUE(Contains(d.Error({"--env", "NOEQUALS", "--", "p"}), "is not KEY=VALUE"));
}

TEST(Flags, AnEmptyValueIsAValue) {
  Demo d;
  EXPECT_EQ(d.Error({"--path=", "--count", "1", "--", "p"}),
            "mitra demo: --path '' is not a file name (e.g. --path a.txt)");
  EXPECT_EQ(d.Error({"--path", "", "--", "p"}),
            "mitra demo: --path '' is not a file name (e.g. --path a.txt)");
}

TEST(Flags, AFlagIsNotTheValueOfTheOneBefore) {
  Demo d;
  EXPECT_EQ(d.Error({"--count", "--small", "1", "--", "p"}),
            "mitra demo: --count needs a value; see `mitra demo --help`");
  EXPECT_EQ(d.Error({"--small", "1", "--count", "--", "p"}),
            "mitra demo: --count needs a value; see `mitra demo --help`");
  EXPECT_EQ(d.Error({"--count"}), "mitra demo: --count needs a value; see `mitra demo --help`");
}

TEST(Flags, ASwitchTakesNoValue) {
  Demo d;
  EXPECT_EQ(d.Error({"--json=yes", "--", "p"}),
            "mitra demo: --json takes no value; see `mitra demo --help`");
}

TEST(Flags, TheFirstThingWrongIsReported) {
  Demo d;
  EXPECT_TRUE(Contains(d.Error({"--frob", "--small", "0", "--", "p"}), "unknown flag '--frob'"));
  EXPECT_TRUE(Contains(d.Error({"--small", "0", "--frob", "--", "p"}), "--small '0'"));
  EXPECT_TRUE(Contains(d.Error({"word", "--count"}), "unexpected argument 'word'"));
}

TEST(Flags, HelpStopsTheReadingUnlessSomethingWrongCameFirst) {
  Demo d;
  ASSERT_TRUE(d.Parse({"--count", "1", "--help", "--small", "0"}).ok());
  EXPECT_TRUE(d.help);
  ASSERT_TRUE(d.Parse({"-h"}).ok());
  EXPECT_TRUE(d.help);
  EXPECT_TRUE(Contains(d.Error({"--small", "0", "--help"}), "--small '0'"));
  EXPECT_TRUE(Contains(d.Error({"--frob", "-h"}), "unknown flag '--frob'"));
}

TEST(Flags, WordsAreTakenInOrderAndOneTooManyIsUnexpected) {
  std::string first, second;
  bool json = false;
  auto parse = [&](const std::vector<std::string>& args) {
    first = second = "";
    Flags flags("words");
    flags.Word("first", &first);
    flags.Word("second", &second);
    flags.Switch("--json", &json);
    return flags.Parse(args);
  };
  ASSERT_TRUE(parse({"a", "--json", "b"}).ok());
  EXPECT_EQ(first, "a");
  EXPECT_EQ(second, "b");
  EXPECT_TRUE(json);
  ASSERT_TRUE(parse({"a"}).ok());
  EXPECT_EQ(second, "");
  EXPECT_EQ(parse({"a", "b", "c"}).message(),
            "mitra words: unexpected argument 'c'; see `mitra words --help`");
}

// ---- mitra plan, mitra profile -------------------------------------------------------------

TEST(PlanCommandLine, ReadsTheFlags) {
  Result<PlanCommandOptions> o = ParsePlanCommand(
      {"--profile", "prof", "--batch-size", "32", "--slots=8", "--top", "3", "--json"});
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->profile_dir, "prof");
  EXPECT_EQ(o->batch_size, 32);
  EXPECT_EQ(o->slots, 8);
  EXPECT_EQ(o->top, 3);
  EXPECT_TRUE(o->json);
  EXPECT_TRUE(o->help_text.empty());

  Result<PlanCommandOptions> validate =
      ParsePlanCommand({"--validate", "run", "--generation", "0"});
  ASSERT_TRUE(validate.ok()) << validate.status().message();
  EXPECT_EQ(validate->validate_dir, "run");
  EXPECT_EQ(validate->generation, 0);
}

TEST(PlanCommandLine, SaysWhatIsWrong) {
  EXPECT_EQ(
      ParsePlanCommand({"--profile", "p", "--batch-size", "8", "--slot", "2"}).status().message(),
      "mitra plan: unknown flag '--slot'; did you mean --slots? See `mitra plan --help`");
  EXPECT_EQ(ParsePlanCommand({"--top", "0"}).status().message(),
            "mitra plan: --top '0' is not a whole number >= 1 (e.g. --top 5)");
  EXPECT_EQ(ParsePlanCommand({"--profile", "p", "--top"}).status().message(),
            "mitra plan: --top needs a value; see `mitra plan --help`");
  EXPECT_EQ(ParsePlanCommand({"--profile", "p", "--", "x"}).status().message(),
            "mitra plan: takes no program; see `mitra plan --help`");
  EXPECT_TRUE(Contains(ParsePlanCommand({"--batch-size", "8", "--slots", "2"}).status().message(),
                       "--profile and --batch-size are required"));
  EXPECT_EQ(ParsePlanCommand({"--profile", "p", "--batch-size", "8"}).status().message(),
            "mitra plan: give either --slots N or --machines FILE");
}

TEST(PlanCommandLine, HelpIsTheUsage) {
  Result<PlanCommandOptions> o = ParsePlanCommand({"--profile", "p", "--help"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->help_text, PlanUsage());
}

TEST(ProfileCommandLine, ReadsTheFlagsAndTheProgram) {
  Result<ProfileCommandOptions> o = ParseProfileCommand(
      {"--machines", "m.txt", "--batch-size", "32", "--out", "prof", "--micro-batches", "8,2",
       "--env", "A=1", "--timeout", "60", "--", "./train", "--out", "x"});
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->machines_path, "m.txt");
  EXPECT_EQ(o->out_dir, "prof");
  EXPECT_EQ(o->micro_batches, (std::vector<int64_t>{2, 8}));
  ASSERT_EQ(o->env.size(), 1u);
  EXPECT_EQ(o->timeout_s, 60);
  EXPECT_EQ(o->program, "./train");
  EXPECT_EQ(o->program_args, (std::vector<std::string>{"--out", "x"}));
}

TEST(ProfileCommandLine, SaysWhatIsWrong) {
  EXPECT_TRUE(Contains(ParseProfileCommand({"--machines", "m", "--", "p"}).status().message(),
                       "--machines, --batch-size and --out are required"));
  EXPECT_TRUE(Contains(ParseProfileCommand({"--machines", "m", "--batch-size", "8", "--out", "o"})
                           .status()
                           .message(),
                       "mitra profile: no program given"));
  EXPECT_TRUE(Contains(ParseProfileCommand({"--micro-batches", "", "--", "p"}).status().message(),
                       "--micro-batches '' is not a list of whole numbers >= 1"));
  EXPECT_EQ(ParseProfileCommand({"--help"})->help_text, ProfileUsage());
}

}  // namespace
}  // namespace mitra::cli
