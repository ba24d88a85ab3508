//===- PackedTrainer.h - the trainer `kiln pack` writes ------------*- C++ -*-===//
//
// `kiln pack MODEL -o trainer` (Pack.cpp) writes one executable that trains
// MODEL's compiled step on a machine with neither Kiln, MLIR nor LLVM: the
// trainer stub (tools/kiln-trainer: the training loop of `kiln train`,
// TrainLoop.h, on the CPU runtime) followed by its payload,
//
//   stub bytes | payload | offset of the payload (8 bytes, little-endian) |
//   "KILNPAK1"
//
// the payload being runtime/Files.h's cacheEntry with the magic
// kPackedTrainerMagic and the fields, in order:
//
//   manifest   "key=value" lines: format, model, source (the file packed),
//              target (cpu or cuda), cpu (the x86-64 level the kernels were
//              compiled for) or cuda (the cubins' architectures), flags
//              (the compile flags), world-size
//   step       the training step's package (.kpkg bytes)
//   eval       the eval package (empty: none, as for a packed .kpkg)
//   kernels    the shared library holding every kernel of both packages,
//              each under runtime/cpu/SharedObjectKernelLoader.h's symbol
//              (empty for CUDA: the packages hold their PTX, cubins and
//              source)
//
// This file reads and writes that layout; no MLIR, no LLVM codegen.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_LIB_PACKEDTRAINER_H
#define KILN_TOOLS_KILN_LIB_PACKEDTRAINER_H

#include "runtime/Status.h"

#include <map>
#include <string>

namespace kiln::cli {

inline constexpr const char *kPackedTrainerMagic = "KILN-TRAINER-1\n";
inline constexpr const char *kPackedTrainerTrailer = "KILNPAK1";

struct PackedTrainer {
  std::map<std::string, std::string> manifest;
  std::string step, eval, kernels;
};

// |stub| followed by |trainer|'s payload and the trailer.
std::string writePackedTrainer(const std::string &stub, const PackedTrainer &trainer);

// The payload of the executable file |path|. A file without the trailer
// fails with kNoPayload in the message; a damaged payload with what is
// wrong.
inline constexpr const char *kNoPayload = "holds no packed model";
runtime::StatusOr<PackedTrainer> readPackedTrainer(const std::string &path);

// Whether this CPU runs code compiled for |level| (x86-64, x86-64-v2,
// x86-64-v3 or x86-64-v4; "generic" on other architectures).
bool cpuSupportsLevel(const std::string &level);

} // namespace kiln::cli

#endif // KILN_TOOLS_KILN_LIB_PACKEDTRAINER_H
