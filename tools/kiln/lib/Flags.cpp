//===- Flags.cpp - the kiln CLI's small command-line parser ---------------===//
//
// Splits a subcommand's words into flags and positional arguments and prints
// its help. Kept deliberately small: flags take their value as --name=VALUE
// or --name VALUE, switches take none, `--` ends the flags.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Flags.h"

#include "tools/kiln/lib/Driver.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace kiln::cli {

FlagParser::FlagParser(std::string command, std::string synopsis,
                       std::string description)
    : command(std::move(command)), synopsis(std::move(synopsis)),
      description(std::move(description)) {}

void FlagParser::addValue(llvm::StringRef name, std::string *out,
                          llvm::StringRef valueName, llvm::StringRef help,
                          char shortName) {
  Flag flag;
  flag.name = name.str();
  flag.shortName = shortName;
  flag.valueName = valueName.str();
  flag.help = help.str();
  flag.value = out;
  flag.group = static_cast<int>(groups.size()) - 1;
  flags.push_back(std::move(flag));
}

void FlagParser::addSwitch(llvm::StringRef name, bool *out, llvm::StringRef help) {
  Flag flag;
  flag.name = name.str();
  flag.help = help.str();
  flag.enabled = out;
  flag.group = static_cast<int>(groups.size()) - 1;
  flags.push_back(std::move(flag));
}

void FlagParser::addPositional(llvm::StringRef name, std::string *out,
                               llvm::StringRef help, bool required) {
  positionals.push_back({name.str(), help.str(), out, required});
}

void FlagParser::addGroup(llvm::StringRef title) { groups.push_back(title.str()); }

FlagParser::Flag *FlagParser::findLong(llvm::StringRef name) {
  for (Flag &flag : flags)
    if (flag.name == name)
      return &flag;
  return nullptr;
}

FlagParser::Flag *FlagParser::findShort(char name) {
  for (Flag &flag : flags)
    if (flag.shortName && flag.shortName == name)
      return &flag;
  return nullptr;
}

bool FlagParser::wasSet(llvm::StringRef name) const {
  for (const Flag &flag : flags)
    if (flag.name == name)
      return flag.seen;
  return false;
}

ParseResult FlagParser::usageError(llvm::raw_ostream &errs,
                                   const llvm::Twine &message) {
  printError(errs, command, message);
  printUsage(errs);
  errs << "Run '" << (helpCommand.empty() ? command : helpCommand)
       << " --help' for the options.\n";
  return ParseResult::usageError;
}

ParseResult FlagParser::parse(llvm::ArrayRef<std::string> args,
                              llvm::raw_ostream &outs, llvm::raw_ostream &errs) {
  size_t nextPositional = 0;
  bool flagsEnded = false;
  auto takePositional = [&](const std::string &word) -> bool {
    if (nextPositional >= positionals.size())
      return false;
    *positionals[nextPositional++].value = word;
    return true;
  };

  for (size_t i = 0; i < args.size(); ++i) {
    llvm::StringRef word = args[i];
    bool isFlag = !flagsEnded && word.size() > 1 && word.starts_with("-");
    if (!isFlag) {
      if (!takePositional(word.str()))
        return usageError(errs, "unexpected argument '" + word + "'");
      continue;
    }
    if (word == "--") {
      flagsEnded = true;
      continue;
    }
    if (word == "--help" || word == "-h" || word == "-help") {
      printHelp(outs);
      return ParseResult::help;
    }

    Flag *flag = nullptr;
    std::optional<std::string> inlineValue;
    if (word.starts_with("--")) {
      auto [name, value] = word.drop_front(2).split('=');
      flag = findLong(name);
      if (!flag)
        return usageError(errs, "unknown flag '--" + name + "'");
      if (word.contains('='))
        inlineValue = value.str();
    } else if (word.size() == 2) {
      flag = findShort(word[1]);
      if (!flag)
        return usageError(errs, "unknown flag '" + word + "'");
    } else {
      return usageError(errs, "unknown flag '" + word +
                                  "' (long flags start with '--')");
    }

    flag->seen = true;
    if (flag->enabled) {
      if (inlineValue)
        return usageError(errs, "flag '--" + flag->name + "' takes no value");
      *flag->enabled = true;
      continue;
    }
    if (inlineValue) {
      *flag->value = *inlineValue;
      continue;
    }
    if (i + 1 >= args.size())
      return usageError(errs, "flag '" + word + "' needs a value (" +
                                  flag->valueName + ")");
    *flag->value = args[++i];
  }

  for (size_t p = nextPositional; p < positionals.size(); ++p)
    if (positionals[p].required)
      return usageError(errs, "missing " + positionals[p].name);
  return ParseResult::ok;
}

std::optional<int> FlagParser::parseOrExit(llvm::ArrayRef<std::string> args,
                                           llvm::raw_ostream &outs,
                                           llvm::raw_ostream &errs) {
  switch (parse(args, outs, errs)) {
  case ParseResult::help:
    return kExitOk;
  case ParseResult::usageError:
    return kExitUsage;
  case ParseResult::ok:
    break;
  }
  return std::nullopt;
}

void FlagParser::printUsage(llvm::raw_ostream &os) const {
  os << "Usage: " << command << " " << synopsis << "\n";
}

void FlagParser::printHelp(llvm::raw_ostream &os) const {
  printUsage(os);
  if (!description.empty())
    os << "\n" << llvm::StringRef(description).rtrim() << "\n";
  if (!positionals.empty()) {
    os << "\nArguments:\n";
    for (const Positional &p : positionals)
      os << "  " << llvm::left_justify(p.name, 24) << " " << p.help << "\n";
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    bool any = false;
    for (const Flag &flag : flags) {
      if (flag.group != static_cast<int>(g))
        continue;
      if (!any)
        os << "\n" << (groups[g].empty() ? std::string("Options") : groups[g])
           << ":\n";
      any = true;
      std::string spelling;
      if (flag.shortName)
        spelling = std::string("-") + flag.shortName + ", ";
      spelling += "--" + flag.name;
      if (!flag.valueName.empty())
        spelling += "=" + flag.valueName;
      os << "  " << llvm::left_justify(spelling, 24) << " " << flag.help << "\n";
    }
    if (g == 0) {
      if (!any)
        os << "\nOptions:\n";
      os << "  " << llvm::left_justify("-h, --help", 24)
         << " print this help and exit\n";
    }
  }
  if (!epilogue.empty())
    os << "\n" << epilogue << "\n";
}

void printError(llvm::raw_ostream &errs, llvm::StringRef command,
                const llvm::Twine &message) {
  errs << command << ": error: " << message << "\n";
}

namespace {
void valueError(llvm::raw_ostream &errs, llvm::StringRef command,
                llvm::StringRef flag, llvm::StringRef value,
                const llvm::Twine &expected) {
  printError(errs, command,
             "--" + flag + "=" + value + ": expected " + expected + ", found '" +
                 value + "'");
}

std::optional<int64_t> toInteger(llvm::StringRef text) {
  int64_t v;
  if (text.empty() || text.getAsInteger(10, v))
    return std::nullopt;
  return v;
}
} // namespace

std::optional<int64_t> parseInteger(llvm::StringRef command, llvm::StringRef flag,
                                    llvm::StringRef value, int64_t min,
                                    llvm::raw_ostream &errs) {
  std::optional<int64_t> v = toInteger(value.trim());
  if (!v || *v < min) {
    valueError(errs, command, flag, value,
               "an integer >= " + llvm::Twine(min));
    return std::nullopt;
  }
  return v;
}

std::optional<llvm::SmallVector<int64_t>>
parseIntegerList(llvm::StringRef command, llvm::StringRef flag,
                 llvm::StringRef value, int64_t min, llvm::raw_ostream &errs) {
  llvm::SmallVector<llvm::StringRef> parts;
  value.split(parts, ',');
  llvm::SmallVector<int64_t> out;
  for (llvm::StringRef part : parts) {
    std::optional<int64_t> v = toInteger(part.trim());
    if (!v || *v < min) {
      valueError(errs, command, flag, value,
                 "a comma-separated list of integers >= " + llvm::Twine(min));
      return std::nullopt;
    }
    out.push_back(*v);
  }
  return out;
}

std::optional<double> parsePositiveReal(llvm::StringRef command,
                                        llvm::StringRef flag,
                                        llvm::StringRef value,
                                        llvm::raw_ostream &errs) {
  std::string text = value.trim().str();
  char *end = nullptr;
  errno = 0;
  double v = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0' || !std::isfinite(v) ||
      v <= 0.0) {
    valueError(errs, command, flag, value, "a positive real number");
    return std::nullopt;
  }
  return v;
}

std::optional<int64_t> parseByteSize(llvm::StringRef command,
                                     llvm::StringRef flag,
                                     llvm::StringRef value,
                                     llvm::raw_ostream &errs) {
  static const std::pair<llvm::StringRef, double> units[] = {
      {"KiB", 1024.0},        {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3},      {"MB", 1e6},
      {"GB", 1e9},            {"TB", 1e12},       {"B", 1.0}};
  llvm::StringRef number = value.trim();
  double scale = 1.0;
  for (const auto &[unit, factor] : units)
    if (number.consume_back(unit)) {
      scale = factor;
      break;
    }
  std::string text = number.trim().str();
  char *end = nullptr;
  errno = 0;
  double v = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
  double bytes = v * scale;
  if (text.empty() || errno != 0 || *end != '\0' || !std::isfinite(bytes) ||
      bytes < 1.0 || bytes > 9.0e18) {
    valueError(errs, command, flag, value,
               "a size such as 24GiB, 1.5GB or 3000MiB (B, KB, MB, GB, TB, "
               "KiB, MiB, GiB or TiB)");
    return std::nullopt;
  }
  return static_cast<int64_t>(bytes);
}

std::optional<bool> parseOnOff(llvm::StringRef command, llvm::StringRef flag,
                               llvm::StringRef value, llvm::raw_ostream &errs) {
  if (value == "on")
    return true;
  if (value == "off")
    return false;
  valueError(errs, command, flag, value, "on or off");
  return std::nullopt;
}

bool applyOnOff(llvm::StringRef command, llvm::StringRef flag,
                llvm::StringRef value, bool &field, llvm::raw_ostream &errs) {
  if (value.empty())
    return true;
  std::optional<bool> on = parseOnOff(command, flag, value, errs);
  if (on)
    field = *on;
  return on.has_value();
}

} // namespace kiln::cli
