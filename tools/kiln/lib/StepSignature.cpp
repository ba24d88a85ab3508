//===- StepSignature.cpp - a step package's signature for `kiln train` ---===//
//
// See StepSignature.h.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/StepSignature.h"

#include "tools/kiln/lib/Flags.h"

#include "runtime/Half.h"

#include <cstring>

namespace kiln::cli {

using runtime::PkgDType;
using runtime::PkgRole;

void StepSignature::describe(const runtime::LoadedPackage &pkg) {
  for (PkgRole role : {PkgRole::Input, PkgRole::Label})
    for (size_t i = 0; i < pkg.inputs.size(); ++i) {
      const runtime::SignatureEntry &e = pkg.inputs[i];
      if (e.role != role)
        continue;
      dataInputs.push_back(i);
      DataArgument d;
      d.name = e.name;
      d.shape = e.shape;
      d.type = e.dtype == PkgDType::F64         ? runtime::ElementType::f64
               : runtime::isFloatDType(e.dtype) ? runtime::ElementType::f32
                                                : runtime::ElementType::i32;
      // The bound the model reads it under (kiln.index_bound), when the
      // package records one (format 1.6 on; 0 unknown).
      d.indexLimit = e.indexBound;
      data.push_back(std::move(d));
    }
  for (size_t i = 0; i < pkg.inputs.size(); ++i)
    if (pkg.inputs[i].role == PkgRole::Step)
      stepCounter = static_cast<int>(i);
  for (size_t i = 0; i < pkg.outputs.size(); ++i)
    if (pkg.outputs[i].role == PkgRole::Loss)
      loss = static_cast<int>(i);
}

void collectState(const runtime::LoadedPackage &pkg,
                  std::vector<StateEntry> &state,
                  std::vector<size_t> &stateInputs) {
  for (size_t i = 0; i < pkg.inputs.size(); ++i) {
    const runtime::SignatureEntry &e = pkg.inputs[i];
    if (e.role != PkgRole::Parameter && e.role != PkgRole::ModelState &&
        e.role != PkgRole::OptimizerState)
      continue;
    state.push_back({e.name, e.role != PkgRole::OptimizerState, e.shape,
                     e.role == PkgRole::Parameter});
    stateInputs.push_back(i);
  }
}

bool matchEvalStep(const runtime::LoadedPackage &trainPkg,
                   const runtime::LoadedPackage &evalPkg, StepSignature &eval,
                   std::vector<std::pair<size_t, size_t>> &parameters,
                   llvm::StringRef command, llvm::raw_ostream &errs) {
  for (size_t i = 0; i < evalPkg.outputs.size(); ++i)
    if (static_cast<int>(i) != eval.loss &&
        evalPkg.outputs[i].shape.size() == 2)
      eval.logits = static_cast<int>(i);
  for (size_t e = 0; e < evalPkg.inputs.size(); ++e) {
    const runtime::SignatureEntry &entry = evalPkg.inputs[e];
    if (entry.role == PkgRole::Input || entry.role == PkgRole::Label)
      continue;
    for (size_t t = 0; t < trainPkg.inputs.size(); ++t)
      if (trainPkg.inputs[t].name == entry.name) {
        if (trainPkg.inputs[t].dtype != entry.dtype ||
            trainPkg.inputs[t].shape != entry.shape) {
          printError(errs, command,
                     "eval input '" + entry.name +
                         "' differs in type from the training step's");
          return false;
        }
        parameters.emplace_back(e, t);
      }
  }
  return true;
}

using runtime::PkgDType;

double readElement(const void *data, PkgDType dtype, int64_t i) {
  switch (dtype) {
  case PkgDType::F64: return static_cast<const double *>(data)[i];
  case PkgDType::F32: return static_cast<const float *>(data)[i];
  case PkgDType::F16: return runtime::f16ToFloat(static_cast<const uint16_t *>(data)[i]);
  case PkgDType::BF16: return runtime::bf16ToFloat(static_cast<const uint16_t *>(data)[i]);
  case PkgDType::I64: return static_cast<double>(static_cast<const int64_t *>(data)[i]);
  case PkgDType::I32: return static_cast<const int32_t *>(data)[i];
  case PkgDType::I8: return static_cast<const int8_t *>(data)[i];
  case PkgDType::I1: return static_cast<const uint8_t *>(data)[i] != 0;
  }
  return 0;
}

void writeElement(void *data, PkgDType dtype, int64_t i, double v) {
  switch (dtype) {
  case PkgDType::F64: static_cast<double *>(data)[i] = v; break;
  case PkgDType::F32: static_cast<float *>(data)[i] = static_cast<float>(v); break;
  case PkgDType::F16: static_cast<uint16_t *>(data)[i] = runtime::floatToF16(static_cast<float>(v)); break;
  case PkgDType::BF16: static_cast<uint16_t *>(data)[i] = runtime::floatToBf16(static_cast<float>(v)); break;
  case PkgDType::I64: static_cast<int64_t *>(data)[i] = static_cast<int64_t>(v); break;
  case PkgDType::I32: static_cast<int32_t *>(data)[i] = static_cast<int32_t>(v); break;
  case PkgDType::I8: static_cast<int8_t *>(data)[i] = static_cast<int8_t>(v); break;
  case PkgDType::I1: static_cast<uint8_t *>(data)[i] = v != 0; break;
  }
}

int64_t elementCount(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

runtime::TensorValues readValues(const void *data, PkgDType dtype, int64_t n) {
  runtime::TensorValues out =
      runtime::TensorValues::zeros(dtype == PkgDType::F64, n);
  if (dtype == PkgDType::F64 || dtype == PkgDType::F32) {
    std::memcpy(out.data(), data, n * out.elementBytes());
    return out;
  }
  for (int64_t i = 0; i < n; ++i)
    out.set(i, readElement(data, dtype, i));
  return out;
}

void writeValues(void *data, PkgDType dtype,
                 const runtime::TensorValues &values) {
  if ((dtype == PkgDType::F64 && values.wide()) ||
      (dtype == PkgDType::F32 && !values.wide())) {
    std::memcpy(data, values.data(), values.size() * values.elementBytes());
    return;
  }
  for (int64_t i = 0; i < values.size(); ++i)
    writeElement(data, dtype, i, values[i]);
}

bool StepSignature::copyBatch(
    const runtime::LoadedPackage &pkg, const runtime::Batch &batch,
    const std::function<runtime::StatusOr<void *>(size_t input)> &hostInput,
    llvm::raw_ostream &errs, llvm::StringRef command) const {
  if (batch.tensors.size() != dataInputs.size()) {
    printError(errs, command,
               "a batch holds " + std::to_string(batch.tensors.size()) +
                   " tensors: expected " + std::to_string(dataInputs.size()));
    return false;
  }
  for (size_t t = 0; t < dataInputs.size(); ++t) {
    runtime::StatusOr<void *> dst = hostInput(dataInputs[t]);
    if (!dst.isOk()) {
      printError(errs, command, dst.status().message());
      return false;
    }
    std::string error;
    if (!copyBatchTensor(batch.tensors[t], pkg.inputs[dataInputs[t]], dst.value(),
                         error)) {
      printError(errs, command, error);
      return false;
    }
  }
  return true;
}

bool copyBatchTensor(const runtime::BatchTensor &src,
                     const runtime::SignatureEntry &e, void *dst,
                     std::string &error) {
  int64_t n = elementCount(e.shape);
  int64_t have = src.elementCount();
  if (have != n) {
    error = "input '" + e.name + "': the batch holds " + std::to_string(have) +
            " values, expected " + std::to_string(n);
    return false;
  }
  if (n == 0) // an empty input: no bytes, and no buffer to copy from
    return true;
  bool same =
      (src.type == runtime::ElementType::f32 && e.dtype == PkgDType::F32) ||
      (src.type == runtime::ElementType::f64 && e.dtype == PkgDType::F64) ||
      (src.type == runtime::ElementType::i32 && e.dtype == PkgDType::I32);
  if (same)
    std::memcpy(dst, src.data(), n * runtime::elementTypeBytes(src.type));
  else
    for (int64_t i = 0; i < n; ++i)
      writeElement(dst, e.dtype, i, src.element(i));
  return true;
}

} // namespace kiln::cli
