//===- StepSignature.cpp - a step package's signature for `kiln train` ---===//
//
// See StepSignature.h.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/StepSignature.h"

#include "tools/kiln/lib/Flags.h"

namespace kiln::cli {

using runtime::PkgDType;
using runtime::PkgRole;

namespace {

bool isFloat(PkgDType dtype) {
  return dtype == PkgDType::F64 || dtype == PkgDType::F32 ||
         dtype == PkgDType::F16 || dtype == PkgDType::BF16;
}

} // namespace

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
      d.isFloat = isFloat(e.dtype);
      // A package does not say how many classes a label has; only
      // synthetic data needs it.
      d.classes = 2;
      data.push_back(std::move(d));
    }
  for (size_t i = 0; i < pkg.inputs.size(); ++i)
    if (pkg.inputs[i].role == PkgRole::Step)
      stepCounter = static_cast<int>(i);
  for (size_t i = 0; i < pkg.outputs.size(); ++i)
    if (pkg.outputs[i].role == PkgRole::Loss)
      loss = static_cast<int>(i);
}

void StepSignature::setClasses(const std::map<std::string, int64_t> &classes) {
  for (DataArgument &d : data)
    if (auto it = classes.find(d.name); it != classes.end())
      d.classes = it->second;
}

void collectState(const runtime::LoadedPackage &pkg,
                  std::vector<StateEntry> &state,
                  std::vector<size_t> &stateInputs) {
  for (size_t i = 0; i < pkg.inputs.size(); ++i) {
    const runtime::SignatureEntry &e = pkg.inputs[i];
    if (e.role != PkgRole::Parameter && e.role != PkgRole::OptimizerState)
      continue;
    state.push_back({e.name, e.role == PkgRole::Parameter, e.shape});
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

} // namespace kiln::cli
