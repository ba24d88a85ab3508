#!/usr/bin/env bash
# Installs the peer libraries the tests and benchmarks compare Kiln against
# (never dependencies of the product): numpy, JAX (CPU), safetensors,
# tensorboard (whose reader checks kiln train's event files), PyTorch, and
# onnx with onnxscript (torch.onnx.export writes the models kiln import reads).
# Idempotent and quiet when all are present.
#
# PyTorch from PyPI is a CUDA build whose full dependency set is several GB.
# Only its CPU path is used here, so it is installed without dependencies
# plus the few shared libraries its import actually loads; cuDNN and the
# rest load lazily and are never touched on the CPU.
set -euo pipefail
pip=(python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore)

python3 -c "import numpy" 2>/dev/null || "${pip[@]}" numpy
python3 -c "import jax" 2>/dev/null || "${pip[@]}" jax
python3 -c "import safetensors" 2>/dev/null || "${pip[@]}" safetensors
python3 -c "import tensorboard" 2>/dev/null || "${pip[@]}" tensorboard
python3 -c "import onnx" 2>/dev/null || "${pip[@]}" onnx
python3 -c "import onnxscript" 2>/dev/null || "${pip[@]}" onnxscript
if ! python3 -c "import torch" 2>/dev/null; then
  echo "install-peers: installing torch (CPU use only)"
  "${pip[@]}" filelock "typing-extensions>=4.13" sympy networkx jinja2 fsspec
  "${pip[@]}" --no-deps torch==2.15.0 "cuda-toolkit[cufile]==13.2.2" nvidia-cufile \
    nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.7.2 nvidia-nccl-cu13==2.30.7
  python3 -c "import torch" || { echo "install-peers: torch does not import; its tests will skip" >&2; exit 1; }
fi
