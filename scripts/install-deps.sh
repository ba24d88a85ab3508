#!/usr/bin/env bash
# Installs every Debian package Kiln needs to build and test. Idempotent: when all
# packages are present it prints nothing and returns at once.
set -euo pipefail

packages=(
  cmake ninja-build g++ clang libclang-rt-14-dev python3 zlib1g-dev
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
  libflatbuffers-dev flatbuffers-compiler
  libopenblas-dev libgloo-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
)

# Python packages the tests use as independent references (never needed by
# the product itself).
python_packages=(numpy)

missing_py=()
for p in "${python_packages[@]}"; do
  python3 -c "import $p" 2>/dev/null || missing_py+=("$p")
done
if [ ${#missing_py[@]} -gt 0 ]; then
  echo "install-deps: pip installing ${missing_py[*]}"
  python3 -m pip install -q "${missing_py[@]}"
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
