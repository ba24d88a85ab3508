//===- Driver.h - the kiln command-line interface -----------------*- C++ -*-===//
//
// `kiln COMMAND [ARGS]`: the user's entry point. tools/kiln/kiln.cpp only
// calls runKiln; each command lives in its own file (Models, Inspect,
// Compile) and takes its words after the command name.
//
// Exit codes, the same for every command:
//   0  success, or --help;
//   1  an error in a value or a file: a bad flag value, an unknown model, a
//      value that is not supported yet, a missing or malformed input file,
//      a module that does not verify, a file that cannot be written;
//   2  a command line that cannot be parsed: an unknown command or flag, a
//      flag without its value, a missing or extra argument (usage follows).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_DRIVER_H
#define KILN_TOOLS_KILN_LIB_DRIVER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace kiln::cli {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// Runs `kiln` with |args| (the words after the program name).
int runKiln(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
            llvm::raw_ostream &errs);

// The commands; each takes the words after its name.
int runModels(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
              llvm::raw_ostream &errs);
int runInspect(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
               llvm::raw_ostream &errs);
int runCompile(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
               llvm::raw_ostream &errs);
int runGradcheck(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
                 llvm::raw_ostream &errs);
int runTrain(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
             llvm::raw_ostream &errs);
int runImport(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
              llvm::raw_ostream &errs);
int runPack(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
            llvm::raw_ostream &errs);
int runLaunch(llvm::ArrayRef<std::string> args, llvm::raw_ostream &outs,
              llvm::raw_ostream &errs);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_DRIVER_H
