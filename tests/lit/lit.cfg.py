# lit configuration for Kiln: FileCheck tests of IR, graph files and the CLI.
import os

import lit.formats

config.name = "Kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test", ".json"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_obj_root, "tests", "lit")

# Tools first from the build, then LLVM's FileCheck, not and count.
# (kiln itself lands in build/bin: build/tools/kiln is its source folder's
# build directory.)
config.environment["PATH"] = os.pathsep.join(
    [os.path.join(config.kiln_obj_root, "bin"), config.kiln_tools_dir,
     config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
config.substitutions.append(("%flatc", config.flatc))
config.substitutions.append(("%python", config.python))
config.substitutions.append(("%schema_dir", os.path.join(config.kiln_src_root, "serialize", "schema")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
if config.cuda_enabled:
    config.available_features.add("cuda")

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
# Kiln's caches (compiled CPU kernels, NVRTC's cubins, autotuning) in the
# build tree, shared by the suite's tests (lit passes no HOME, so without
# this nothing would be cached): every entry holds its whole key, so a test
# reads only what it would have compiled. A test of a cache names its own
# KILN_CACHE_DIR.
config.environment["KILN_CACHE_DIR"] = os.path.join(config.test_exec_root, "kiln-cache")
