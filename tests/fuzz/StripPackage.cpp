//===- StripPackage.cpp - a package without its kernels' code, as a seed --===//
//
// kiln-package-strip IN.kpkg OUT.kpkg writes IN without its kernels' PTX,
// cubins and objects (and with each source cut to one character): a seed
// for kiln-package-fuzzer, whose loader checks are about the buffers,
// thunks, signature and metadata, not the code bytes that are most of a
// compiled package. Written unchecked, as a test writes packages the
// loader must judge.
//
//===----------------------------------------------------------------------===//

#include "runtime/package/Package.h"
#include "serialize/PackageWriter.h"

#include <cstdio>
#include <fstream>

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kiln-package-strip IN.kpkg OUT.kpkg\n");
    return 2;
  }
  kiln::runtime::StatusOr<kiln::runtime::LoadedPackage> loaded =
      kiln::runtime::loadPackage(argv[1]);
  if (!loaded.isOk()) {
    std::fprintf(stderr, "kiln-package-strip: %s\n",
                 loaded.status().message().c_str());
    return 1;
  }
  kiln::runtime::LoadedPackage pkg = loaded.value();
  for (kiln::runtime::PackageKernel &k : pkg.kernels) {
    if (!k.source.empty())
      k.source = "x";
    k.ptx.clear();
    k.cubins.clear();
    k.object.clear();
  }
  std::vector<uint8_t> bytes = kiln::serialize::writePackageUnchecked(pkg);
  std::ofstream out(argv[2], std::ios::binary);
  out.write(reinterpret_cast<const char *>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  return out ? 0 : 1;
}
