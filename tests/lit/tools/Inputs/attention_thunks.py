# Prints the attention library calls of a package (flatc --json output):
# kind, parameters, and each operand's and result's dtype and shape.
import json
import sys

package = json.load(open(sys.argv[1]))
buffers = package["buffers"]


def describe(indices):
    return [(buffers[i].get("dtype", "F64"), buffers[i].get("shape", []))
            for i in indices]


count = 0
for thunk in package["thunks"]:
    library = thunk.get("library", "Gemm")
    if not library.startswith("Attention"):
        continue
    count += 1
    params = thunk["attention"]
    fields = ["batch", "heads", "q_len", "kv_len", "head_dim", "value_dim",
              "scale", "causal", "layout"]
    defaults = {"scale": 1.0, "causal": False, "layout": "BHTD"}
    shown = {f: params.get(f, defaults.get(f, 0)) for f in fields}
    print(library, shown, "operands", describe(thunk.get("operands", [])),
          "results", describe(thunk.get("results", [])))
print(count, "attention thunks")
