#include "launcher/shell_quote.h"

namespace mitra::launcher {
namespace {

Status CheckNoNul(std::string_view word, std::string_view what) {
  if (word.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(std::string(what) + " contains a NUL byte, which no process " +
                                   "can receive; remove it");
  }
  return Status::Ok();
}

}  // namespace

std::string ShellQuote(std::string_view word) {
  std::string quoted = "'";
  for (const char c : word) {
    if (c == '\'') {
      quoted += "'\\''";  // close the quote, an escaped quote, reopen
    } else {
      quoted += c;
    }
  }
  quoted += '\'';
  return quoted;
}

bool IsValidEnvironmentName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

Result<std::string> ShellCommandLine(const std::vector<std::string>& argv) {
  if (argv.empty()) return Status::InvalidArgument("the command is empty");
  std::string line;
  for (const std::string& word : argv) {
    if (Status s = CheckNoNul(word, "the word '" + word.substr(0, word.find('\0')) + "...'");
        !s.ok()) {
      return s;
    }
    if (!line.empty()) line += ' ';
    line += ShellQuote(word);
  }
  return line;
}

Result<std::string> EnvCommandLine(const std::map<std::string, std::string>& environment,
                                   const std::vector<std::string>& argv) {
  if (argv.empty()) return Status::InvalidArgument("the command is empty");
  if (argv.front().find('=') != std::string::npos) {
    return Status::InvalidArgument("program '" + argv.front() +
                                   "' contains '=', which env would read as a variable; rename "
                                   "or move it");
  }
  std::vector<std::string> words = {"env", "-i", "--"};
  for (const auto& [name, value] : environment) {
    if (!IsValidEnvironmentName(name)) {
      return Status::InvalidArgument("environment variable name '" + name +
                                     "' is not valid (expected letters, digits and '_', not "
                                     "starting with a digit)");
    }
    if (Status s = CheckNoNul(value, "the value of " + name); !s.ok()) return s;
    words.push_back(name + "=" + value);
  }
  words.insert(words.end(), argv.begin(), argv.end());
  return ShellCommandLine(words);
}

namespace {

std::vector<std::string> PresentSecrets(const std::map<std::string, std::string>& environment,
                                        const std::vector<std::string>& secrets) {
  std::vector<std::string> present;
  for (const std::string& name : secrets) {
    if (environment.count(name)) present.push_back(name);
  }
  return present;
}

}  // namespace

Result<std::string> EnvCommandLineWithSecrets(const std::map<std::string, std::string>& environment,
                                              const std::vector<std::string>& secrets,
                                              const std::vector<std::string>& argv) {
  const std::vector<std::string> present = PresentSecrets(environment, secrets);
  if (present.empty()) return EnvCommandLine(environment, argv);
  if (argv.empty()) return Status::InvalidArgument("the command is empty");
  std::map<std::string, std::string> visible = environment;
  for (const std::string& name : present) {
    if (!IsValidEnvironmentName(name)) {
      return Status::InvalidArgument("environment variable name '" + name + "' is not valid");
    }
    visible.erase(name);
  }
  std::vector<std::string> wrapped = SecretReader(present);
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return EnvCommandLine(visible, wrapped);
}

std::vector<std::string> SecretReader(const std::vector<std::string>& names) {
  std::string script;
  for (const std::string& name : names) {
    script += "IFS= read -r " + name + " || { echo 'mitra: no value for " + name +
              " on standard input' >&2; exit 111; }; export " + name + "; ";
  }
  script += "exec \"$0\" \"$@\"";
  return {"/bin/sh", "-c", script};
}

Result<std::string> SecretLines(const std::map<std::string, std::string>& environment,
                                const std::vector<std::string>& secrets) {
  std::string lines;
  for (const std::string& name : PresentSecrets(environment, secrets)) {
    const std::string& value = environment.at(name);
    if (value.find('\n') != std::string::npos) {
      return Status::InvalidArgument("the value of " + name + " holds a newline");
    }
    lines += value + "\n";
  }
  return lines;
}

}  // namespace mitra::launcher
