//===- PackedTrainer.cpp - the trainer `kiln pack` writes -----------------===//

#include "tools/kiln/lib/PackedTrainer.h"

#include "runtime/Files.h"
#include "runtime/cpu/Blas.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

namespace kiln::cli {

std::string writePackedTrainer(const std::string &stub, const PackedTrainer &trainer) {
  std::string manifest;
  for (const auto &[key, value] : trainer.manifest)
    manifest += key + "=" + value + "\n";
  std::string out = stub;
  uint64_t offset = out.size();
  out += runtime::cacheEntry(kPackedTrainerMagic,
                             {manifest, trainer.step, trainer.eval, trainer.kernels});
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((offset >> (8 * i)) & 0xff));
  out += kPackedTrainerTrailer;
  return out;
}

runtime::StatusOr<PackedTrainer> readPackedTrainer(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return runtime::Status::error("cannot read " + path + ": " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t trailer = std::strlen(kPackedTrainerTrailer);
  if (bytes.size() < 8 + trailer ||
      bytes.compare(bytes.size() - trailer, trailer, kPackedTrainerTrailer) != 0)
    return runtime::Status::error(path + " " + kNoPayload);
  uint64_t offset = 0;
  size_t at = bytes.size() - trailer - 8;
  for (int i = 0; i < 8; ++i)
    offset |= uint64_t(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  std::vector<std::string> fields;
  if (offset > at ||
      !runtime::parseCacheEntry(bytes.substr(offset, at - offset), kPackedTrainerMagic,
                                fields) ||
      fields.size() != 4)
    return runtime::Status::error(path + ": its packed model is damaged (expected " +
                                  "a manifest, a step, an eval step and a kernel "
                                  "library after byte " + std::to_string(offset) + ")");
  PackedTrainer trainer;
  std::istringstream manifest(fields[0]);
  for (std::string line; std::getline(manifest, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos)
      trainer.manifest[line.substr(0, eq)] = line.substr(eq + 1);
  }
  trainer.step = std::move(fields[1]);
  trainer.eval = std::move(fields[2]);
  trainer.kernels = std::move(fields[3]);
  bool cuda = trainer.manifest["target"] == "cuda";
  if (trainer.step.empty() || (!cuda && trainer.kernels.empty()))
    return runtime::Status::error(path + ": its packed model has no step or no kernels");
  return trainer;
}

bool cpuSupportsLevel(const std::string &level) {
#if defined(__x86_64__)
  return runtime::cpu::x86LevelSupported(runtime::cpu::x86Features(), level);
#else
  return level == "generic";
#endif
}

} // namespace kiln::cli
