//===- kiln.cpp - the kiln command-line tool ------------------------------===//
//
// A thin main: the commands live in tools/kiln/lib (Driver.h).
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/Driver.h"

#include "llvm/Support/InitLLVM.h"

#include <string>
#include <vector>

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  return kiln::cli::runKiln(args, llvm::outs(), llvm::errs());
}
