//===- Flags.h - the kiln CLI's small command-line parser ---------*- C++ -*-===//
//
// Each `kiln` subcommand declares its own flags on a FlagParser, so its
// `--help` lists exactly its own options (llvm::cl would also list every
// option that libLLVM and libMLIR register globally). The parser only splits
// the command line; turning a value into a number or a list is done by the
// parse* helpers below, which say which flag was wrong, what was expected and
// what was found.
//
// Exit codes of the whole CLI (see Driver.h): a command line that cannot be
// split (unknown command or flag, missing value or argument) is a usage error,
// exit 2; a bad value or any problem with a file is exit 1.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_FLAGS_H
#define KILN_TOOLS_KILN_LIB_FLAGS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::cli {

// How a command line parse ended.
enum class ParseResult {
  ok,         // run the command
  help,       // --help was given: help printed, exit 0
  usageError, // message and usage printed, exit 2
};

class FlagParser {
public:
  // |command| is the full command name ("kiln models"); |synopsis| the usage
  // line after it; |description| a paragraph printed under the usage.
  FlagParser(std::string command, std::string synopsis, std::string description);

  // A flag that takes a value: --name=VALUE or --name VALUE. |shortName|,
  // when not 0, also accepts -s VALUE. The value is stored in |out| as given;
  // |out| keeps its default when the flag is absent.
  void addValue(llvm::StringRef name, std::string *out, llvm::StringRef valueName,
                llvm::StringRef help, char shortName = 0);
  // A flag without a value: --name sets |out| to true.
  void addSwitch(llvm::StringRef name, bool *out, llvm::StringRef help);
  // The next positional argument, in declaration order.
  void addPositional(llvm::StringRef name, std::string *out, llvm::StringRef help,
                     bool required = true);
  // Starts a titled group in --help; the flags added after it belong to it.
  void addGroup(llvm::StringRef title);
  // The command to suggest with --help after a usage error (default: the
  // command itself).
  void setHelpCommand(std::string text) { helpCommand = std::move(text); }
  // Extra text printed at the end of --help.
  void setEpilogue(std::string text) { epilogue = std::move(text); }

  // Parses |args| (the words after the command name). Errors and help go to
  // |errs| and |outs|.
  ParseResult parse(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
                    llvm::raw_ostream &errs);
  // parse(), as a command's entry uses it: std::nullopt to run the command,
  // else the exit code to return at once (Driver.h's kExitOk after --help,
  // kExitUsage after a usage error).
  std::optional<int> parseOrExit(llvm::ArrayRef<std::string> args,
                                 llvm::raw_ostream &outs,
                                 llvm::raw_ostream &errs);

  // True when flag --|name| appeared on the command line.
  bool wasSet(llvm::StringRef name) const;

  void printUsage(llvm::raw_ostream &os) const;
  void printHelp(llvm::raw_ostream &os) const;

  const std::string &commandName() const { return command; }

private:
  struct Flag {
    std::string name;
    char shortName = 0;
    std::string valueName; // empty for a switch
    std::string help;
    std::string *value = nullptr;
    bool *enabled = nullptr;
    bool seen = false;
    int group = 0;
  };
  struct Positional {
    std::string name;
    std::string help;
    std::string *value = nullptr;
    bool required = true;
  };

  Flag *findLong(llvm::StringRef name);
  Flag *findShort(char name);
  ParseResult usageError(llvm::raw_ostream &errs, const llvm::Twine &message);

  std::string command, synopsis, description, epilogue, helpCommand;
  std::vector<Flag> flags;
  std::vector<Positional> positionals;
  std::vector<std::string> groups{""};
};

// Value helpers. Each prints "<command>: error: --<flag>=<value>: expected
// ..." to |errs| and returns nullopt when |value| is not of the expected form.
std::optional<int64_t> parseInteger(llvm::StringRef command, llvm::StringRef flag,
                                    llvm::StringRef value, int64_t min,
                                    llvm::raw_ostream &errs);
std::optional<llvm::SmallVector<int64_t>>
parseIntegerList(llvm::StringRef command, llvm::StringRef flag,
                 llvm::StringRef value, int64_t min, llvm::raw_ostream &errs);
std::optional<double> parsePositiveReal(llvm::StringRef command,
                                        llvm::StringRef flag,
                                        llvm::StringRef value,
                                        llvm::raw_ostream &errs);
// A size in bytes: a positive number with an optional unit, B, KB, MB, GB,
// TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), case as
// written ("24GiB", "1.5GB", "3000MiB", "1e9").
std::optional<int64_t> parseByteSize(llvm::StringRef command,
                                     llvm::StringRef flag,
                                     llvm::StringRef value,
                                     llvm::raw_ostream &errs);
// "on" or "off".
std::optional<bool> parseOnOff(llvm::StringRef command, llvm::StringRef flag,
                               llvm::StringRef value, llvm::raw_ostream &errs);
// An on|off flag's raw |value| ("" when not given): sets |field| when
// given; false, after parseOnOff's error, when it is neither.
bool applyOnOff(llvm::StringRef command, llvm::StringRef flag,
                llvm::StringRef value, bool &field, llvm::raw_ostream &errs);

// Prints "<command>: error: <message>\n".
void printError(llvm::raw_ostream &errs, llvm::StringRef command,
                const llvm::Twine &message);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_FLAGS_H
