//===- PackageWriter.h - write a .kpkg package ------------------*- C++ -*-===//
//
// The compiler's side of serialize/schema/package.fbs: it fills the plain
// structs of runtime/package/Package.h and gets the package's bytes back.
// The writer runs the loader's semantic checks first, so a package it writes
// is one the runtime accepts; no MLIR here, the compiler maps its planned
// module onto these structs itself.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_SERIALIZE_PACKAGEWRITER_H
#define KILN_SERIALIZE_PACKAGEWRITER_H

#include "runtime/package/Package.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::serialize {

// Serializes |package| (after checkPackage) into FlatBuffers bytes with the
// "KPKG" identifier and the version it carries.
runtime::StatusOr<std::vector<uint8_t>>
writePackage(const runtime::LoadedPackage &package);

// Serializes |package| without checking it first: only for tests that
// feed the loader packages it must refuse.
std::vector<uint8_t>
writePackageUnchecked(const runtime::LoadedPackage &package);

// Writes |package| to |path| (through a temporary file and a rename, so an
// earlier package at |path| survives a failed write).
runtime::Status writePackageFile(const runtime::LoadedPackage &package,
                                 const std::string &path);

} // namespace kiln::serialize

#endif // KILN_SERIALIZE_PACKAGEWRITER_H
