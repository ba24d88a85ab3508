# lit configuration for the end-to-end CLI runs: the zoo models written,
# inspected and compiled by the real `kiln` binary.
import os

import lit.formats

config.name = "Kiln-e2e"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_obj_root, "tests", "e2e")

# kiln lands in build/bin, kiln-opt in build/tools; then FileCheck and not.
config.environment["PATH"] = os.pathsep.join(
    [os.path.join(config.kiln_obj_root, "bin"),
     os.path.join(config.kiln_obj_root, "tools"),
     config.llvm_tools_dir,
     config.environment.get("PATH", os.environ["PATH"])])
config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
config.substitutions.append(("%python", config.python))
config.substitutions.append(("%flatc", config.flatc))
