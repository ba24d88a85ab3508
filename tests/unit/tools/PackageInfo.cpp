//===- PackageInfo.cpp - print what the runtime loader reads from a .kpkg -===//
//
// `kiln-package-info FILE.kpkg` loads a package with the runtime's loader
// (runtime/package/Package.h: every check) and prints its counts, arena
// size, the end of the planned step buffers (those that are not signature
// inputs), every buffer, kernel and thunk (with its GEMM's parameters), for
// tests/lit/tools/package.test to compare against the compiled module. A
// package the loader refuses prints its error and exits 1.
//
//===----------------------------------------------------------------------===//

#include "runtime/package/Package.h"

#include <algorithm>
#include <cstdio>
#include <set>

int main(int argc, char **argv) {
  using namespace kiln::runtime;
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln-package-info FILE.kpkg\n");
    return 2;
  }
  StatusOr<LoadedPackage> loaded = loadPackage(argv[1]);
  if (!loaded.isOk()) {
    std::fprintf(stderr, "error: %s\n", loaded.status().message().c_str());
    return 1;
  }
  const LoadedPackage &p = loaded.value();
  std::set<uint32_t> inputBuffers;
  for (const SignatureEntry &e : p.inputs)
    inputBuffers.insert(e.buffer);
  uint64_t stepEnd = 0;
  for (uint32_t i = 0; i < p.buffers.size(); ++i)
    if (!inputBuffers.count(i))
      stepEnd = std::max(stepEnd, p.buffers[i].offset + p.buffers[i].size);
  std::printf("version %u.%u\n", p.majorVersion, p.minorVersion);
  std::printf("target %s %s\n",
              p.target.kind == TargetKind::Cpu ? "cpu" : "cuda",
              p.target.triple.c_str());
  std::printf("buffers %zu\nkernels %zu\nthunks %zu\n", p.buffers.size(),
              p.kernels.size(), p.thunks.size());
  std::printf("inputs %zu\noutputs %zu\ninits %zu\n", p.inputs.size(),
              p.outputs.size(), p.parameterInits.size());
  std::printf("arena-size %llu\nstep-buffers-end %llu\n",
              (unsigned long long)p.arenaSize, (unsigned long long)stepEnd);
  for (uint32_t i = 0; i < p.buffers.size(); ++i) {
    const PackageBuffer &b = p.buffers[i];
    std::printf("buffer %u '%s' role %u offset %llu size %llu updates %d\n", i,
                b.name.c_str(), (unsigned)b.role, (unsigned long long)b.offset,
                (unsigned long long)b.size, b.updates);
  }
  for (uint32_t i = 0; i < p.kernels.size(); ++i) {
    const PackageKernel &k = p.kernels[i];
    bool bitcode = k.object.size() >= 4 && k.object[0] == 'B' &&
                   k.object[1] == 'C' && k.object[2] == 0xC0 &&
                   k.object[3] == 0xDE;
    std::printf("kernel %u '%s' kind %u entry '%s' %s nodes %zu", i,
                k.name.c_str(), (unsigned)k.kind, k.entryPoint.c_str(),
                bitcode ? "bitcode" : "not-bitcode", k.sourceNodes.size());
    // A CUDA kernel's dynamic shared memory (its row cache), when any.
    if (k.sharedMemoryBytes)
      std::printf(" shared %u", k.sharedMemoryBytes);
    std::printf("\n");
  }
  for (uint32_t i = 0; i < p.thunks.size(); ++i) {
    const PackageThunk &t = p.thunks[i];
    std::printf("thunk %u kind %u kernel %d operands", i, (unsigned)t.kind,
                t.kernel);
    for (uint32_t o : t.operands)
      std::printf(" %u", o);
    std::printf(" results");
    for (uint32_t r : t.results)
      std::printf(" %u", r);
    if (t.hasGemm)
      std::printf(" gemm m %lld n %lld k %lld batch %lld transpose %d %d",
                  (long long)t.gemm.m, (long long)t.gemm.n, (long long)t.gemm.k,
                  (long long)t.gemm.batch, t.gemm.transposeLhs,
                  t.gemm.transposeRhs);
    if (t.hasGemm && t.gemm.epilogue != PkgGemmEpilogue::None)
      std::printf(" epilogue %s", pkgGemmEpilogueName(t.gemm.epilogue));
    if (t.hasConv) {
      std::printf(" library %u conv", (unsigned)t.library);
      for (const std::vector<int64_t> *v :
           {&t.conv.inputShape, &t.conv.filterShape, &t.conv.outputShape,
            &t.conv.strides, &t.conv.padding, &t.conv.dilation}) {
        std::printf(" [");
        for (size_t j = 0; j < v->size(); ++j)
          std::printf(j ? " %lld" : "%lld", (long long)(*v)[j]);
        std::printf("]");
      }
      std::printf(" groups %lld", (long long)t.conv.groups);
    }
    if (t.hasCollective)
      std::printf(" collective %u reduction %u dimension %lld root %lld "
                  "groups %zu",
                  (unsigned)t.collective.kind,
                  (unsigned)t.collective.reduction,
                  (long long)t.collective.dimension,
                  (long long)t.collective.root, t.collective.groups.size());
    std::printf("\n");
  }
  std::printf("model '%s' hash-bytes %zu hash ", p.metadata.modelName.c_str(),
              p.metadata.graphHash.size());
  for (uint8_t b : p.metadata.graphHash)
    std::printf("%02x", b);
  std::printf("\n");
  std::printf("strategy %u world-size %u\n", (unsigned)p.metadata.strategy,
              p.metadata.worldSize);
  for (const ShardLayout &l : p.metadata.shards) {
    std::printf("shard %s length %lld world-size %u:", l.name.c_str(),
                (long long)l.length, l.worldSize);
    for (const ShardSlot &s : l.slots)
      std::printf(" %s@%lld", s.name.c_str(), (long long)s.offset);
    std::printf("\n");
  }
  return 0;
}
