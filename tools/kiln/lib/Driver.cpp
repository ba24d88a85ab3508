//===- Driver.cpp - the kiln command-line interface -----------------------===//
//
// Dispatches to the commands and prints the top-level usage. Commands that
// DESIGN.md lists but that do not exist yet are named in the usage as such,
// so `kiln train` says "not available yet" instead of "unknown command".
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Driver.h"

#include "tools/kiln/lib/Flags.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Format.h"

#include <iterator>

namespace kiln::cli {

namespace {

struct Command {
  const char *name;
  const char *summary;
  int (*run)(llvm::ArrayRef<std::string>, llvm::raw_ostream &,
             llvm::raw_ostream &);
};

const Command kCommands[] = {
    {"models", "write a model from the built-in zoo (mlp, lenet5, gpt)",
     runModels},
    {"import", "read an ONNX model (torch.onnx.export) as a kiln model",
     runImport},
    {"inspect", "summarize a model: inputs, parameters, FLOPs, ops (--dot)",
     runInspect},
    {"compile", "verify and compile a model (--emit=mlir)", runCompile},
    {"gradcheck", "check every parameter gradient against finite differences",
     runGradcheck},
    {"train", "train a model (--backend=reference: on the reference interpreter)",
     runTrain},
    {"launch", "start the ranks of a distributed job (as torchrun)",
     runLaunch},
    {"pack", "write one standalone executable that trains a model (AOT)",
     runPack},
};

// "models, inspect, compile" with |lastSeparator| before the last name.
std::string commandList(llvm::StringRef lastSeparator) {
  std::string list;
  size_t count = std::size(kCommands);
  for (size_t i = 0; i < count; ++i) {
    if (i > 0)
      list += i + 1 == count ? lastSeparator.str() : std::string(", ");
    list += kCommands[i].name;
  }
  return list;
}

void printUsage(llvm::raw_ostream &os) {
  os << "Usage: kiln COMMAND [ARGS...]\n"
        "\n"
        "Kiln: a compiler-first deep-learning training framework.\n"
        "\n"
        "Commands:\n";
  for (const Command &c : kCommands)
    os << "  " << llvm::left_justify(c.name, 10) << " " << c.summary << "\n";
  os << "\n"
        "Run 'kiln COMMAND --help' for a command's options.\n"
        "Exit codes: 0 success, 1 error in a value or file, 2 command-line "
        "usage error.\n";
}

} // namespace

int runKiln(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
            llvm::raw_ostream &errs) {
  if (args.empty()) {
    printError(errs, "kiln", "missing COMMAND");
    printUsage(errs);
    return kExitUsage;
  }
  llvm::StringRef name = args.front();
  if (name == "--help" || name == "-h" || name == "help") {
    printUsage(outs);
    return kExitOk;
  }
  for (const Command &c : kCommands)
    if (name == c.name)
      return c.run(args.drop_front(), outs, errs);
  printError(errs, "kiln",
             llvm::Twine("unknown command '") + name + "' (expected " +
                 commandList(" or ") + ")");
  printUsage(errs);
  return kExitUsage;
}

} // namespace kiln::cli
