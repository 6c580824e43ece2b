// Building POSIX shell command lines that run exactly the given argv.
//
// A remote command travels as one string that the remote login shell parses, so every word is
// put in single quotes: inside them the shell interprets nothing ($, `, \, ;, newlines stay
// literal). Nothing from a machine list, a program argument or an environment value can then
// add a command. All functions are pure and thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mitra/common/status.h"

namespace mitra::launcher {

// `word` as one shell word in single quotes; a single quote inside becomes '\''.
// ShellQuote("it's") == "'it'\\''s'", ShellQuote("") == "''".
std::string ShellQuote(std::string_view word);

// True for a portable environment variable name: [A-Za-z_][A-Za-z0-9_]*.
bool IsValidEnvironmentName(std::string_view name);

// The quoted words of `argv` separated by spaces. InvalidArgument when `argv` is empty or a
// word contains a NUL byte (no process can receive one).
Result<std::string> ShellCommandLine(const std::vector<std::string>& argv);

// `env -i -- NAME=value... program args...`: runs `argv` with exactly `environment` (nothing
// inherited from the remote login shell). InvalidArgument for a bad variable name, a NUL byte,
// or a program that env would read as an assignment (it contains '=').
Result<std::string> EnvCommandLine(const std::map<std::string, std::string>& environment,
                                   const std::vector<std::string>& argv);

// {"/bin/sh", "-c", script}: a shell that reads one line of standard input into each of
// `names` (valid names, in order), exports them and execs its arguments ("$0" "$@", same pid);
// a missing line ends it with exit code 111 and a message on stderr.
std::vector<std::string> SecretReader(const std::vector<std::string>& names);

// Like EnvCommandLine, but the variables named in `secrets` are not on the line: a shell
// started by env reads their values from standard input, one line each in the order of
// `secrets`, exports them and execs `argv` (same pid). A missing line ends it with exit code
// 111 and a message on stderr. Names in `secrets` that `environment` lacks are left out.
Result<std::string> EnvCommandLineWithSecrets(const std::map<std::string, std::string>& environment,
                                              const std::vector<std::string>& secrets,
                                              const std::vector<std::string>& argv);
// The lines EnvCommandLineWithSecrets's shell reads: each secret's value and a newline, in the
// order of `secrets`. InvalidArgument when a value holds a newline.
Result<std::string> SecretLines(const std::map<std::string, std::string>& environment,
                                const std::vector<std::string>& secrets);

}  // namespace mitra::launcher
