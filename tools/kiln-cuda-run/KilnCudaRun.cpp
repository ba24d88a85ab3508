//===- KilnCudaRun.cpp - train or time a CUDA package, without LLVM -------===//
//
// `kiln-cuda-run PACKAGE.kpkg [options]` runs a CUDA package (compiled on
// another machine by `kiln compile --target=cuda`) on a GPU through the GPU
// runtime (runtime/cuda/CudaExecutable.h) and nothing else: it links no
// LLVM, MLIR or OpenBLAS, so it runs on the GPU test machine, which has
// CUDA but no MLIR (DESIGN.md, "Testing without a GPU"). `kiln train
// --device=cuda` is the product path; this is its runtime half for
// bench/gpu/check.sh:
//
//   --data=SPEC       fashion-mnist:DIR, npy:DIR, tokens:FILE or synthetic
//                     (default synthetic: --synthetic-size samples, 60000,
//                     drawn as `kiln train` draws them for --seed)
//   --classes=C       synthetic integer data's range (default the bound
//                     the package records, SignatureEntry.index_bound, else
//                     10); data files are checked against that bound
//   --no-shuffle=1    file order (else each epoch shuffled as kiln train's
//                     sampler does for its seed), so that the losses can be
//                     compared step by step with `kiln train --no-shuffle`
//   --epochs=N / --steps=N   one epoch by default
//   --device=N, --cuda-graphs=on|off, --log-every=N
//   --cuda-pdl=on|off programmatic dependent launch of the kernels (sm_90)
//   --tf32=on|off     f32 GEMMs and convolutions in TF32 (default off)
//   --autotune=on|off cuBLASLt's algorithms (the convolutions' GEMMs too)
//                     and the attention's variants timed per shape at load
//                     (default on; Autotune.h); each shape timed now gets a
//                     line: every candidate's time, the choice
//   --time=N          after the training steps, time N more steps (CUDA
//                     events around each) and print the median step time,
//                     tokens/s (--tokens-per-step) and model FLOPs
//                     utilization (--flops-per-step, --peak-tflops)
//   --profile=FILE    with --time: write each thunk's time in one more
//                     profiled step as kiln train --profile does (CSV:
//                     thunk,ms,calls,kind,what; FILE.json: the step's
//                     timeline as a Chrome trace), for `kiln inspect
//                     STEP.kpkg --roofline --measured=FILE` on the machine
//                     that compiled it
//
// Prints the device, the kernels' code source, the loss every --log-every
// steps and at the end; exits 1 on any error (naming it) and when the loss
// is not finite.
//
//===----------------------------------------------------------------------===//

#include "runtime/Files.h"
#include "runtime/Units.h"
#include "runtime/cuda/CudaExecutable.h"
#include "runtime/data/DataSpec.h"
#include "runtime/data/Sampler.h"
#include "runtime/metrics/Nvtx.h"
#include "runtime/metrics/ThunkProfile.h"
#include "runtime/package/Package.h"
#include "runtime/package/PackageData.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

using namespace kiln::runtime;

namespace {

int fail(const std::string &message) {
  std::fprintf(stderr, "kiln-cuda-run: error: %s\n", message.c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  std::map<std::string, std::string> flags;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: kiln-cuda-run PACKAGE.kpkg [--data=SPEC] "
                  "[--epochs=N|--steps=N] [--device=N] [--cuda-graphs=on|off] "
                  "[--cuda-pdl=on|off] [--autotune=on|off] [--tf32=on|off] "
                  "[--log-every=N] [--time=N] [--tokens-per-step=T] "
                  "[--flops-per-step=F] [--peak-tflops=P] [--classes=C] "
                  "[--profile=FILE]\n");
      return 0;
    }
    if (a.rfind("--", 0) == 0) {
      size_t eq = a.find('=');
      if (eq == std::string::npos)
        return fail(a + ": expected --NAME=VALUE");
      flags[a.substr(2, eq - 2)] = a.substr(eq + 1);
    } else if (path.empty()) {
      path = a;
    } else {
      return fail("unexpected argument '" + a + "'");
    }
  }
  if (path.empty())
    return fail("expected a CUDA package (see --help)");
  auto number = [&](const char *name, double fallback) {
    auto it = flags.find(name);
    return it == flags.end() ? fallback : std::atof(it->second.c_str());
  };
  for (auto &[name, value] : flags)
    if (name != "data" && name != "epochs" && name != "steps" &&
        name != "device" && name != "cuda-graphs" && name != "log-every" &&
        name != "autotune" && name != "cuda-pdl" && name != "tf32" &&
        name != "time" && name != "tokens-per-step" &&
        name != "flops-per-step" && name != "peak-tflops" &&
        name != "classes" && name != "no-shuffle" && name != "seed" &&
        name != "synthetic-size" && name != "profile")
      return fail("--" + name + ": unknown option");
  for (const char *onOff : {"cuda-graphs", "autotune", "cuda-pdl", "tf32"})
    if (flags.count(onOff) && flags[onOff] != "on" && flags[onOff] != "off")
      return fail(std::string("--") + onOff + "=" + flags[onOff] +
                  ": expected on or off");
  if (flags.count("profile") && number("time", 0) <= 0)
    return fail("--profile: needs --time=N (the thunks are timed after the "
                "timed steps)");

  StatusOr<LoadedPackage> pkg = loadPackage(path);
  if (!pkg.isOk())
    return fail(pkg.status().message());

  // The data inputs (inputs, then labels) and the loss, and the data opened
  // and checked (its shapes, its indices against the package's bounds)
  // before any device work: a bad data file fails in a moment, with or
  // without a GPU, not after the kernels have loaded.
  const LoadedPackage &p = pkg.value();
  std::vector<size_t> dataInputs;
  std::vector<TensorSpec> specs;
  int64_t batch = 0;
  int64_t classes = int64_t(number("classes", 10));
  for (PkgRole role : {PkgRole::Input, PkgRole::Label})
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      const SignatureEntry &e = p.inputs[i];
      if (e.role != role)
        continue;
      if (e.shape.empty())
        return fail("input '" + e.name + "': expected a batch dimension");
      if (!batch)
        batch = e.shape[0];
      TensorSpec spec;
      spec.name = e.name;
      spec.type = dataElementType(e.dtype);
      spec.shape.assign(e.shape.begin() + 1, e.shape.end());
      // The bound the package records (1.6 on) is checked against data
      // files and, unless --classes says otherwise, the synthetic range.
      spec.indexLimit = e.indexBound;
      spec.classes = e.indexBound > 0 && !flags.count("classes") ? e.indexBound
                                                                 : classes;
      if (e.indexBound > 0 && spec.type == ElementType::i32 &&
          spec.classes > e.indexBound)
        return fail("--classes=" + std::to_string(spec.classes) +
                    ": the package reads '" + e.name + "' as indices below " +
                    std::to_string(e.indexBound));
      specs.push_back(spec);
      dataInputs.push_back(i);
    }
  // Steps are counted in batches of the first input's first dimension: a
  // package without data, or with a batch of 0, has none to count.
  if (specs.empty())
    return fail(path + ": the package has no input or label to feed");
  if (batch < 1)
    return fail(path + ": input '" + p.inputs[dataInputs.front()].name +
                "' has a batch dimension of 0: no sample fits a batch");
  int loss = -1;
  for (size_t i = 0; i < p.outputs.size(); ++i)
    if (p.outputs[i].role == PkgRole::Loss)
      loss = int(i);
  if (loss < 0 || p.outputs[loss].dtype != PkgDType::F32)
    return fail(path + ": expected an f32 output with role loss");

  StatusOr<DataSpec> dataSpec =
      parseDataSpec(flags.count("data") ? flags["data"] : "synthetic");
  if (!dataSpec.isOk())
    return fail("--data: " + dataSpec.status().message());
  DataOptions dataOptions;
  dataOptions.syntheticSize = int64_t(number("synthetic-size", 60000));
  dataOptions.seed = uint64_t(number("seed", 0));
  bool shuffle = !flags.count("no-shuffle") || flags["no-shuffle"] == "0";
  StatusOr<std::unique_ptr<Dataset>> dataset =
      openDataset(dataSpec.value(), specs, dataOptions);
  if (!dataset.isOk())
    return fail("--data: " + dataset.status().message());
  int64_t perEpoch = dataset.value()->size() / batch;
  if (perEpoch < 1)
    return fail("the dataset holds fewer samples than one batch");
  int64_t steps = flags.count("steps") ? int64_t(number("steps", 0))
                                       : int64_t(number("epochs", 1)) * perEpoch;
  int64_t logEvery = std::max<int64_t>(1, int64_t(number("log-every", 100)));

  StatusOr<std::unique_ptr<cuda::CudaApi>> api = cuda::loadCudaApi();
  if (!api.isOk())
    return fail(api.status().message());
  cuda::CudaOptions options;
  options.device = int(number("device", 0));
  options.graphs = flags.count("cuda-graphs") == 0 || flags["cuda-graphs"] != "off";
  options.autotune = flags.count("autotune") == 0 || flags["autotune"] != "off";
  options.programmaticLaunch =
      flags.count("cuda-pdl") == 0 || flags["cuda-pdl"] != "off";
  options.allowTf32 = flags.count("tf32") && flags["tf32"] == "on";
  options.log = [](const std::string &n) { std::printf("%s\n", n.c_str()); };
  // The device's free memory before the load (the context made first, so
  // that only the load's own allocations count), for the line below.
  size_t freeBefore = 0, freeAfter = 0, deviceBytes = 0;
  bool measured = api.value()->setDevice(options.device).isOk() &&
                  api.value()->memGetInfo(&freeBefore, &deviceBytes).isOk();
  auto t0 = std::chrono::steady_clock::now();
  StatusOr<std::unique_ptr<cuda::CudaExecutable>> made =
      cuda::CudaExecutable::create(pkg.value(), *api.value(), options);
  if (!made.isOk())
    return fail(path + ": " + made.status().message());
  cuda::CudaExecutable &exec = *made.value();
  double loadSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::map<std::string, int> codes;
  for (cuda::KernelCode c : exec.kernelCode())
    ++codes[cuda::kernelCodeName(c)];
  const cuda::CudaDeviceInfo &dev = exec.device();
  std::printf("kiln-cuda-run: device %d: %s (sm_%u, %d SMs); %zu kernels (",
              dev.index, dev.name.c_str(), dev.smArch(), dev.multiprocessors,
              exec.kernelCode().size());
  for (auto &[name, n] : codes)
    std::printf("%s %d ", name.c_str(), n);
  size_t programmatic = 0;
  for (size_t i = 0; i < exec.package().thunks.size(); ++i)
    programmatic += exec.programmaticLaunch(i);
  std::printf("), %zu thunks (%zu kernels launched with PDL), arena %.1f MiB, "
              "loaded in %.2f s\n",
              exec.package().thunks.size(), programmatic,
              exec.package().arenaSize / 1048576.0, loadSeconds);
  // What the runtime counts as the step's device memory (the arena and its
  // libraries' workspaces: what --memory-budget bounds), against what the
  // load took from the device's free memory, which also holds the kernels'
  // modules and the libraries' own state.
  const cuda::CudaStepMemory &memory = exec.memory();
  std::printf("kiln-cuda-run: device memory %s (%s)",
              formatBytes(memory.total()).c_str(),
              cuda::describeStepMemory(memory).c_str());
  if (measured && api.value()->memGetInfo(&freeAfter, &deviceBytes).isOk())
    std::printf("; the load took %s of the device's free memory (%s of %s "
                "free now)",
                formatBytes(freeBefore > freeAfter ? freeBefore - freeAfter : 0)
                    .c_str(),
                formatBytes(freeAfter).c_str(),
                formatBytes(deviceBytes).c_str());
  std::printf("\n");
  // Where the runtime's own kernels came from: NVRTC (its time) or the
  // cubin cache, part of the load time above.
  for (const std::string &origin : exec.kernelOrigins())
    std::printf("kiln-cuda-run: %s\n", origin.c_str());
  auto [checked, loaded] = exec.checkedKernelParameters();
  std::printf("kiln-cuda-run: %zu of %zu kernels' parameters checked against "
              "their thunks (cuFuncGetParamInfo)\n",
              checked, loaded);
  for (const cuda::Tuning &t : exec.tuning()) {
    if (t.ms.empty())
      continue;
    std::printf("kiln-cuda-run: tuned %s (%zu thunks): ms", t.shape.c_str(),
                t.thunks.size());
    for (size_t i = 0; i < t.ms.size(); ++i)
      std::printf(i == size_t(t.chosen) ? " [%.4f]" : " %.4f", t.ms[i]);
    std::printf("; candidate %d (%s)%s%s\n", t.chosen, t.description.c_str(),
                t.error.empty() ? "" : "; failed: ", t.error.c_str());
  }
  if (Status s = exec.initialize(); !s.isOk())
    return fail(s.message());


  std::vector<int64_t> order;
  int64_t orderEpoch = -1;
  auto feed = [&](int64_t step) -> Status {
    int64_t epochStep = step % perEpoch;
    if (orderEpoch != step / perEpoch) {
      orderEpoch = step / perEpoch;
      order.resize(dataset.value()->size());
      for (size_t i = 0; i < order.size(); ++i)
        order[i] = int64_t(i);
      if (shuffle)
        order = shuffledRange(dataset.value()->size(),
                              dataOptions.seed + uint64_t(orderEpoch));
    }
    std::vector<int64_t> indices(order.begin() + epochStep * batch,
                                 order.begin() + (epochStep + 1) * batch);
    StatusOr<Batch> b = assembleBatch(*dataset.value(), indices);
    if (!b.isOk())
      return b.status();
    for (size_t t = 0; t < dataInputs.size(); ++t) {
      const BatchTensor &src = b->tensors[t];
      const SignatureEntry &e = p.inputs[dataInputs[t]];
      StatusOr<void *> dst = exec.hostInput(dataInputs[t]);
      if (!dst.isOk())
        return dst.status();
      std::string error;
      if (!copyBatchTensor(src, e, dst.value(), error))
        return Status::error(error);
    }
    return exec.submitInputs();
  };

  float first = NAN, last = NAN;
  auto trainStart = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    // Nsight Systems' rows (Nvtx.h): each step, as kiln train's.
    nvtx::Range range("step " + std::to_string(step + 1));
    if (Status s = feed(step); !s.isOk())
      return fail("step " + std::to_string(step) + ": " + s.message());
    if (Status s = exec.run(); !s.isOk())
      return fail("step " + std::to_string(step) + ": " + s.message());
    if (step == 0 || (step + 1) % logEvery == 0 || step + 1 == steps) {
      if (Status s = exec.readOutput(loss, &last); !s.isOk())
        return fail(s.message());
      if (step == 0)
        first = last;
      std::printf("step %lld loss %.6f\n", (long long)step + 1, last);
      if (!std::isfinite(last))
        return fail("the loss is not finite at step " + std::to_string(step + 1));
    }
  }
  if (Status s = exec.synchronize(); !s.isOk())
    return fail(s.message());
  double trainSeconds = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - trainStart)
                            .count();
  std::printf("kiln-cuda-run: %lld steps (%.2f epochs) in %.2f s, %.0f samples/s, "
              "loss %.5f -> %.5f, graphs %s\n",
              (long long)steps, double(steps) / perEpoch, trainSeconds,
              steps * batch / std::max(trainSeconds, 1e-9), first, last,
              exec.usingGraph() ? "on"
              : exec.graphFallbackReason().empty()
                  ? "off"
                  : exec.graphFallbackReason().c_str());

  int64_t timed = int64_t(number("time", 0));
  if (timed > 0) {
    // The same batch every timed step: the data pipeline is not timed.
    if (Status s = feed(0); !s.isOk())
      return fail(s.message());
    std::vector<double> ms;
    for (int64_t i = 0; i < timed; ++i) {
      nvtx::Range range("timed step " + std::to_string(i + 1));
      auto a = std::chrono::steady_clock::now();
      if (Status s = exec.run(); !s.isOk())
        return fail(s.message());
      if (Status s = exec.synchronize(); !s.isOk())
        return fail(s.message());
      ms.push_back(std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - a)
                       .count());
    }
    std::sort(ms.begin(), ms.end());
    double median = ms[ms.size() / 2];
    double tokens = number("tokens-per-step", double(batch));
    double flops = number("flops-per-step", 0);
    double peak = number("peak-tflops", 989); // H100/H200 dense bf16
    std::printf("kiln-cuda-run: step median %.3f ms (min %.3f, %lld steps), "
                "%.0f tokens/s",
                median, ms.front(), (long long)timed, tokens / (median / 1e3));
    if (flops > 0)
      std::printf(", MFU %.1f%%", 100.0 * flops / (median / 1e3) / (peak * 1e12));
    std::printf("\n");
    exec.setProfiling(true);
    if (Status s = exec.run(); !s.isOk())
      return fail(s.message());
    if (Status s = exec.collectProfile(); !s.isOk())
      return fail(s.message());
    if (auto it = flags.find("profile"); it != flags.end()) {
      // As kiln train --profile writes it: CSV, or a trace for FILE.json.
      std::vector<ThunkTime> rows = exec.thunkTimes();
      const std::string &file = it->second;
      if (Status s = writeFileAtomically(
              file, isThunkTracePath(file)
                        ? thunkProfileTrace(rows, "kiln-cuda-run: " + path)
                        : thunkProfileCsv(rows));
          !s.isOk())
        return fail("--profile=" + file + ": " + s.message());
      std::printf("kiln-cuda-run: thunk times written to %s\n", file.c_str());
    }
    // The five slowest thunks.
    std::vector<std::pair<double, size_t>> slow;
    for (size_t i = 0; i < exec.profile().size(); ++i)
      slow.push_back({exec.profile()[i].totalMs, i});
    std::sort(slow.rbegin(), slow.rend());
    for (size_t i = 0; i < std::min<size_t>(5, slow.size()); ++i)
      std::printf("  thunk %zu (%s): %.3f ms\n", slow[i].second,
                  pkgDescribeThunk(p, slow[i].second).c_str(), slow[i].first);
  }
  return 0;
}
