// Shell quoting: every word reaches the program as is, whatever it contains.
#include "launcher/shell_quote.h"

#include <gtest/gtest.h>

namespace mitra::launcher {
namespace {

TEST(ShellQuote, WrapsPlainWordsInSingleQuotes) {
  EXPECT_EQ(ShellQuote("hello"), "'hello'");
  EXPECT_EQ(ShellQuote("two words"), "'two words'");
}

TEST(ShellQuote, EmptyStringStaysOneWord) { EXPECT_EQ(ShellQuote(""), "''"); }

TEST(ShellQuote, SingleQuotesAreClosedEscapedAndReopened) {
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("'"), "''\\'''");
  EXPECT_EQ(ShellQuote("''"), "''\\'''\\'''");
}

TEST(ShellQuote, LeavesShellSyntaxLiteralInsideTheQuotes) {
  EXPECT_EQ(ShellQuote("$(rm -rf /)"), "'$(rm -rf /)'");
  EXPECT_EQ(ShellQuote("`id`; echo x && y | z > f"), "'`id`; echo x && y | z > f'");
  EXPECT_EQ(ShellQuote("a\nb"), "'a\nb'");
  EXPECT_EQ(ShellQuote("\\ \" $HOME *"), "'\\ \" $HOME *'");
}

TEST(ShellCommandLine, QuotesEveryWord) {
  Result<std::string> line = ShellCommandLine({"/bin/echo", "a b", "", "it's", "$(x);y"});
  ASSERT_TRUE(line.ok());
  EXPECT_EQ(*line, "'/bin/echo' 'a b' '' 'it'\\''s' '$(x);y'");
}

TEST(ShellCommandLine, RefusesAnEmptyCommandAndNulBytes) {
  EXPECT_EQ(ShellCommandLine({}).status().code(), Status::Code::kInvalidArgument);
  const Result<std::string> nul = ShellCommandLine({"echo", std::string("a\0b", 3)});
  EXPECT_EQ(nul.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(nul.status().message().find("NUL"), std::string::npos);
}

TEST(IsValidEnvironmentName, AcceptsPortableNamesOnly) {
  EXPECT_TRUE(IsValidEnvironmentName("PATH"));
  EXPECT_TRUE(IsValidEnvironmentName("_x1"));
  EXPECT_FALSE(IsValidEnvironmentName(""));
  EXPECT_FALSE(IsValidEnvironmentName("1X"));
  EXPECT_FALSE(IsValidEnvironmentName("A=B"));
  EXPECT_FALSE(IsValidEnvironmentName("A B"));
  EXPECT_FALSE(IsValidEnvironmentName("A;rm"));
  EXPECT_FALSE(IsValidEnvironmentName("$(x)"));
}

TEST(EnvCommandLine, GivesExactlyTheEnvironment) {
  Result<std::string> line =
      EnvCommandLine({{"A", "1"}, {"B", "x 'y' $(z)"}}, {"/bin/prog", "--flag"});
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_EQ(*line, "'env' '-i' '--' 'A=1' 'B=x '\\''y'\\'' $(z)' '/bin/prog' '--flag'");
}

TEST(EnvCommandLine, RefusesBadNamesAndAmbiguousPrograms) {
  const Result<std::string> bad_name = EnvCommandLine({{"X;rm -rf /", "1"}}, {"/bin/true"});
  EXPECT_EQ(bad_name.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(bad_name.status().message().find("X;rm -rf /"), std::string::npos);
  EXPECT_EQ(EnvCommandLine({}, {"/opt/a=b/prog"}).status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(EnvCommandLine({{"A", std::string("\0", 1)}}, {"/bin/true"}).status().code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(EnvCommandLine({}, {}).status().code(), Status::Code::kInvalidArgument);
}

TEST(EnvCommandLineWithSecrets, TheLineCarriesTheSecretsNameButNotItsValue) {
  const std::map<std::string, std::string> env = {{"A", "1"}, {"T", "s3cret"}};
  Result<std::string> line = EnvCommandLineWithSecrets(env, {"T"}, {"/bin/prog", "--x"});
  ASSERT_TRUE(line.ok()) << line.status().message();
  EXPECT_EQ(line->find("s3cret"), std::string::npos) << *line;
  EXPECT_NE(line->find("read -r T"), std::string::npos) << *line;
  EXPECT_NE(line->find("'A=1'"), std::string::npos) << *line;
  EXPECT_EQ(*SecretLines(env, {"T"}), "s3cret\n");
}

TEST(EnvCommandLineWithSecrets, WithoutSecretsItIsEnvCommandLineAndANewlineIsRefused) {
  EXPECT_EQ(*EnvCommandLineWithSecrets({{"A", "1"}}, {"T"}, {"/bin/true"}),
            *EnvCommandLine({{"A", "1"}}, {"/bin/true"}));
  EXPECT_FALSE(SecretLines({{"T", "a\nb"}}, {"T"}).ok());
}

}  // namespace
}  // namespace mitra::launcher
