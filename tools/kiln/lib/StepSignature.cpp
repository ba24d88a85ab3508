//===- StepSignature.cpp - a step package's signature for `kiln train` ---===//
//
// See StepSignature.h.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/StepSignature.h"

#include "tools/kiln/lib/Flags.h"

#include "runtime/Initializers.h"
#include "runtime/checkpoint/Sharded.h"
#include "runtime/package/PackageData.h"

namespace kiln::cli {

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
      d.type = runtime::dataElementType(e.dtype);
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

bool valuesFit(const runtime::SignatureEntry &e,
               const runtime::TensorValues &values, std::string &error) {
  int64_t n = runtime::elementCount(e.shape);
  if (values.size() == n)
    return true;
  error = "holds " + std::to_string(values.size()) + " values: expected " +
          std::to_string(n);
  return false;
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

void findEvalPredictions(const runtime::LoadedPackage &evalPkg,
                         StepSignature &eval) {
  for (size_t i = 0; i < evalPkg.outputs.size(); ++i) {
    const runtime::SignatureEntry &e = evalPkg.outputs[i];
    if (static_cast<int>(i) != eval.loss && e.shape.size() == 1 &&
        (e.dtype == runtime::PkgDType::I32 ||
         e.dtype == runtime::PkgDType::I64))
      eval.predictions = static_cast<int>(i);
  }
}

bool bindEvalInputs(const runtime::LoadedPackage &trainPkg,
                    const runtime::LoadedPackage &evalPkg,
                    std::vector<std::pair<size_t, size_t>> &parameters,
                    std::vector<runtime::InputBinding> &bindings,
                    std::string &why, llvm::StringRef command,
                    llvm::raw_ostream &errs) {
  parameters.clear();
  bindings.clear();
  why.clear();
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
  for (auto [evalInput, trainInput] : parameters)
    bindings.push_back({evalInput, trainInput});
  runtime::StatusOr<runtime::SharedArenaPlan> shared =
      runtime::planSharedArena(trainPkg, evalPkg, bindings);
  if (!shared.isOk()) {
    bindings.clear();
    why = shared.status().message();
  }
  return true;
}

bool initShardInputs(
    const runtime::LoadedPackage &pkg, int rank, int worldSize,
    const std::function<runtime::TensorValues(size_t input)> &readInput,
    const std::function<bool(size_t input, const runtime::TensorValues &,
                             std::string &error)> &writeInput,
    llvm::StringRef command, llvm::raw_ostream &errs) {
  for (const runtime::ShardLayout &layout : pkg.metadata.shards) {
    if (static_cast<int>(layout.worldSize) != worldSize) {
      printError(errs, command,
                 "the step shards '" + layout.name + "' over " +
                     std::to_string(layout.worldSize) +
                     " ranks, but the job has " + std::to_string(worldSize) +
                     " (WORLD_SIZE); compile it for this world size");
      return false;
    }
    std::map<std::string, runtime::NamedTensor> first;
    runtime::ShardedBucket bucket;
    bucket.name = layout.name;
    bucket.length = layout.length;
    for (const runtime::ShardSlot &slot : layout.slots) {
      bucket.params.push_back({slot.name, slot.offset, slot.shape});
      runtime::NamedTensor &t = first[slot.name];
      t.shape = slot.shape;
      int input = runtime::findSignatureEntry(pkg.inputs, slot.name);
      if (input >= 0) {
        t.values = readInput(input);
        continue;
      }
      runtime::InitSpec spec;
      spec.kind =
          static_cast<runtime::InitKind>(static_cast<uint8_t>(slot.init.kind));
      spec.value = slot.init.value;
      spec.scale = slot.init.scale;
      spec.seed = static_cast<uint64_t>(slot.init.seed);
      // In double: writing the block rounds it to the bucket's type.
      t.values = runtime::initialize(spec, slot.shape);
    }
    runtime::StatusOr<runtime::TensorValues> block = runtime::shardBlock(
        bucket, rank, worldSize,
        [&](const std::string &name) -> const runtime::NamedTensor * {
          auto it = first.find(name);
          return it == first.end() ? nullptr : &it->second;
        },
        "shard '" + layout.name + "'");
    int input = runtime::findSignatureEntry(pkg.inputs, layout.name);
    if (!block.isOk() || input < 0) {
      printError(errs, command,
                 block.isOk() ? "the step has no input '" + layout.name + "'"
                              : block.status().message());
      return false;
    }
    std::string error;
    if (!writeInput(input, block.value(), error)) {
      printError(errs, command, "shard '" + layout.name + "': " + error);
      return false;
    }
  }
  return true;
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
    if (!runtime::copyBatchTensor(batch.tensors[t], pkg.inputs[dataInputs[t]],
                                  dst.value(), error)) {
      printError(errs, command, error);
      return false;
    }
  }
  return true;
}

} // namespace kiln::cli
