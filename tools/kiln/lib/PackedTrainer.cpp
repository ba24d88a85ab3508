//===- PackedTrainer.cpp - the trainer `kiln pack` writes -----------------===//

#include "tools/kiln/lib/PackedTrainer.h"

#include "runtime/Files.h"
#include "runtime/cpu/Blas.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <sys/stat.h>
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
  // The trailer first (a directory, a pipe or a short file holds none);
  // then the payload alone, not the stub before it.
  struct stat info;
  if (::stat(path.c_str(), &info) != 0)
    return runtime::Status::error("cannot read " + path + ": " + std::strerror(errno));
  size_t trailer = std::strlen(kPackedTrainerTrailer);
  if (!S_ISREG(info.st_mode) || static_cast<uint64_t>(info.st_size) < 8 + trailer)
    return runtime::Status::error(path + " " + kNoPayload);
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> file(std::fopen(path.c_str(), "rb"),
                                                        &std::fclose);
  if (!file)
    return runtime::Status::error("cannot read " + path + ": " + std::strerror(errno));
  uint64_t size = static_cast<uint64_t>(info.st_size);
  auto readAt = [&](uint64_t at, size_t n, std::string &out) {
    out.assign(n, '\0');
    return ::fseeko(file.get(), static_cast<off_t>(at), SEEK_SET) == 0 &&
           std::fread(out.data(), 1, n, file.get()) == n;
  };
  std::string tail;
  if (!readAt(size - 8 - trailer, 8 + trailer, tail))
    return runtime::Status::error("cannot read " + path + ": " + std::strerror(errno));
  if (tail.compare(8, trailer, kPackedTrainerTrailer) != 0)
    return runtime::Status::error(path + " " + kNoPayload);
  uint64_t offset = 0;
  for (int i = 0; i < 8; ++i)
    offset |= uint64_t(static_cast<unsigned char>(tail[i])) << (8 * i);
  uint64_t at = size - 8 - trailer;
  std::string payload;
  if (offset > at || !readAt(offset, static_cast<size_t>(at - offset), payload))
    return runtime::Status::error(path + ": its packed model is damaged (its "
                                  "payload offset " + std::to_string(offset) +
                                  " lies outside the file)");
  std::vector<std::string> fields;
  if (!runtime::parseCacheEntry(payload, kPackedTrainerMagic, fields) ||
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
