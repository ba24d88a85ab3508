//===- Files.h - atomic writes and Kiln's cache directories -------*- C++ -*-===//
//
// What every part of Kiln that keeps files uses: checkpoints and their
// indexes, the runtime's cubin and autotuning caches, the compiler's NVRTC
// cache. No LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_FILES_H
#define KILN_RUNTIME_FILES_H

#include "runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::runtime {

// Writes |text| to |path| through a temporary file whose name is unique to
// this writer (process and call: several threads of one process may write
// the same path), renamed over |path|. On failure the error names the file
// and the reason, |path| is untouched and no temporary file is left.
Status writeFileAtomically(const std::string &path, const std::string &text);

// $KILN_CACHE_DIR/|sub| (else $HOME/.cache/kiln/|sub|), created; "" when
// KILN_CACHE_DIR is "off" or empty, there is no HOME, or it cannot be made.
std::string kilnCacheDirectory(const std::string &sub);

// FNV-1a over |text|: a file name for a key whose file holds the key
// itself (a collision is only a miss), or a short identity of a source.
uint64_t fnv1a(const std::string &text);

// fnv1a(|text|) as 16 hex digits: a cache file's name, or a checksum.
std::string fnv1aHex(const std::string &text);

// A cache file's bytes: |magic|, then each field as its length (eight
// little-endian bytes) and its bytes. What the runtime's caches write
// (CubinCache.h, cpu/jit/OrcKernelLoader.h).
std::string cacheEntry(const std::string &magic,
                       const std::vector<std::string> &fields);

// The fields of cache file |path| as cacheEntry wrote them with |magic|,
// or false: no file, another magic, a length past the end of the file, or
// bytes after the last field (a damaged length is a miss, never a large
// allocation).
bool readCacheEntry(const std::string &path, const std::string &magic,
                    std::vector<std::string> &fields);
// The same of bytes in memory (a trainer's payload, tools/kiln/lib/Pack.h).
bool parseCacheEntry(const std::string &text, const std::string &magic,
                     std::vector<std::string> &fields);

// A compiled kernel's cache entry (the CPU kernels' caches:
// cpu/jit/OrcKernelLoader.h, codegen/cpu/BitcodeCache.h): |output|, made
// from |input| under |identity| (what else it depends on), as the fields
// identity, input, output and a checksum of output.
std::string keyedCacheEntry(const std::string &magic,
                            const std::string &identity,
                            const std::string &input,
                            const std::string &output);
// The output such an entry in file |path| holds, or false: no entry, an
// identity or input that differs from these in full, no output, or a
// checksum that does not hold.
bool readKeyedCacheEntry(const std::string &path, const std::string &magic,
                         const std::string &identity, const std::string &input,
                         std::string &output);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_FILES_H
