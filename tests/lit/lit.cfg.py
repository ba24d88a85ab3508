# lit configuration for Kiln: FileCheck tests of IR, graph files and the CLI.
import os

import lit.formats

config.name = "Kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test", ".json"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_obj_root, "tests", "lit")
# lit starts the tests that took longest first, from the times of the last
# run in the build tree; a fresh tree has none and lit reads the ones kept
# here (.lit_test_times.txt, a clean-clone run's on two cores), so that the
# longest do not start last and leave a core idle at the end (about 30 s of
# CI's run). Only the order depends on them.

# Tools first from the build, then LLVM's FileCheck, not and count.
# (kiln itself lands in build/bin: build/tools/kiln is its source folder's
# build directory.)
config.environment["PATH"] = os.pathsep.join(
    [os.path.join(config.kiln_obj_root, "bin"), config.kiln_tools_dir,
     config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
config.substitutions.append(("%flatc", config.flatc))
config.substitutions.append(("%python", config.python))
# The NVTX tool of tests/unit/cuda/FakeNvtx.cpp (nvtx.test, REQUIRES: cuda).
config.substitutions.append(("%fake_nvtx", config.fake_nvtx))
config.substitutions.append(("%schema_dir", os.path.join(config.kiln_src_root, "serialize", "schema")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
if config.cuda_enabled:
    config.available_features.add("cuda")

# The highest x86-64 microarchitecture level this host runs (`kiln pack
# --cpu=`): %host_cpu_level, and the feature x86-64-v4 on an AVX-512 host.
# A trainer packed for a level the host lacks refuses to start, so a test
# that runs one packs it for %host_cpu_level.
def host_cpu_level():
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:
        return "x86-64"
    flags = set(flags)
    v2 = {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}
    v3 = v2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
    v4 = v3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
    for level, needs in (("x86-64-v4", v4), ("x86-64-v3", v3), ("x86-64-v2", v2)):
        if needs <= flags:
            return level
    return "x86-64"
config.substitutions.append(("%host_cpu_level", host_cpu_level()))
if host_cpu_level() == "x86-64-v4":
    config.available_features.add("x86-64-v4")

# Peer libraries for comparison tests: a test that needs one says
# `REQUIRES: torch` (or jax, numpy, tensorboard, onnx, onnxscript) and is
# reported unsupported without it.
import subprocess
for module in ("numpy", "jax", "torch", "tensorboard", "onnx", "onnxscript"):
    if subprocess.call([config.python, "-c", "import " + module],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
        config.available_features.add(module)
config.environment["PYTHONPATH"] = os.path.join(config.test_source_root, "lib")
config.environment["KILN_TOOLS_DIR"] = config.kiln_tools_dir
# A randomized test's seed variable (KILN_ONNX_SEED, ...) reaches the test,
# so that the seed a failure printed reruns it under lit.
for name, value in os.environ.items():
    if name.startswith("KILN_") and name.endswith("_SEED"):
        config.environment[name] = value
# Kiln's caches (compiled CPU kernels, NVRTC's cubins, autotuning) in the
# build tree, shared by the suite's tests (lit passes no HOME, so without
# this nothing would be cached): every entry holds its whole key, so a test
# reads only what it would have compiled. A test of a cache names its own
# KILN_CACHE_DIR. `--param kiln_cache_dir=DIR` names another: the sanitized
# runs (scripts/sanitize.sh) read the plain build's, whose entries are the
# same bytes (the same kernels through the same NVRTC and LLVM, libraries
# no sanitizer instruments), instead of compiling every kernel again.
config.environment["KILN_CACHE_DIR"] = lit_config.params.get(
    "kiln_cache_dir", os.path.join(config.test_exec_root, "kiln-cache"))
