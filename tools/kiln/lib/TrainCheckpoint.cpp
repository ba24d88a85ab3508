//===- TrainCheckpoint.cpp - `kiln train`'s checkpoints --------------------===//
//
// Reads the checkpoint --resume continues from and writes it into the
// model, gathers zero3's parameters, and writes checkpoints (plain, or
// sharded per rank with an index under ZeRO). Each file is written to a
// temporary file and renamed, and the `latest` pointer is replaced the same
// way, so a failed write (a full disk) leaves the earlier checkpoints and
// the pointer as they were.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/TrainCheckpoint.h"

#include "tools/kiln/lib/Diagnostics.h"

#include "runtime/Files.h"
#include "runtime/checkpoint/Sharded.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

#include <fstream>

namespace kiln::cli {
namespace {

runtime::ShardedBucket bucketOf(const runtime::ShardLayout &l) {
  runtime::ShardedBucket b;
  b.name = l.name;
  b.length = l.length;
  for (const runtime::ShardSlot &slot : l.slots)
    b.params.push_back({slot.name, slot.offset, slot.shape});
  return b;
}

} // namespace

bool readResumeState(TrainOptions &options,
                     std::optional<runtime::TrainingState> &resumed,
                     llvm::raw_ostream &errs) {
  const std::string &seed = options.seedFlag;
  std::string latestPath = options.checkpointDir + "/latest";
  std::ifstream latest(latestPath);
  std::string name;
  if (!latest || !std::getline(latest, name) || name.empty()) {
    printError(errs, kTrainCommand,
               "--resume: " + latestPath +
                   ": expected a file naming the latest checkpoint");
    return false;
  }
  // A ZeRO checkpoint's pointer names its index (one file per rank):
  // loaded and consolidated into full parameters and optimizer state.
  runtime::StatusOr<runtime::TrainingState> state =
      runtime::isShardIndexName(name)
          ? runtime::loadShardedCheckpoint(options.checkpointDir + "/" + name)
          : runtime::loadCheckpoint(options.checkpointDir + "/" + name);
  if (!state.isOk()) {
    printError(errs, kTrainCommand, "--resume: " + state.status().message());
    return false;
  }
  resumed = std::move(state.value());
  if (!seed.empty() && options.seed != resumed->seed) {
    printError(errs, kTrainCommand,
               "--seed=" + seed + ": the checkpoint " + name +
                   " was trained with seed " + std::to_string(resumed->seed) +
                   "; resume without --seed or with --seed=" +
                   std::to_string(resumed->seed));
    return false;
  }
  options.seed = resumed->seed;
  return true;
}

TrainState::TrainState(TrainBackend &model, const runtime::dist::DistEnv &env,
                       runtime::dist::Communicator *communicator)
    : model_(model), env_(env), communicator_(communicator),
      entries_(model.state()) {
  for (const StateEntry &e : entries_) {
    if (e.parameter)
      parameterNames_.insert(e.name);
    stateNames_.insert(e.name);
  }
  for (const runtime::ShardLayout &l : model.shards())
    shardLayouts_[l.name] = &l;
}

std::pair<std::string, std::string>
TrainState::stateKey(const std::string &name) const {
  for (const std::string &param : parameterNames_)
    if (name.size() > param.size() + 1 && name.compare(0, param.size(), param) == 0 &&
        name[param.size()] == '.')
      return {name.substr(param.size() + 1), param};
  return {"state", name};
}

bool TrainState::restore(const runtime::TrainingState &resumed,
                         llvm::raw_ostream &errs) {
  std::map<std::string, const runtime::NamedTensor *> params;
  for (const runtime::NamedTensor &t : resumed.parameters)
    params[t.name] = &t;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const StateEntry &e = entries_[i];
    const runtime::NamedTensor *found = nullptr;
    std::string what;
    auto [shardSlot, shardName] = stateKey(e.name);
    auto layout = shardLayouts_.find(e.parameter ? e.name : shardName);
    if (layout != shardLayouts_.end()) {
      // This rank's block of the bucket, cut from the full tensors.
      const std::map<std::string, std::vector<runtime::NamedTensor>>::const_iterator
          slot = resumed.optimizer.find(shardSlot);
      runtime::StatusOr<std::vector<float>> block = runtime::shardBlock(
          bucketOf(*layout->second), env_.rank, env_.worldSize,
          [&](const std::string &name) -> const runtime::NamedTensor * {
            if (e.parameter) {
              auto it = params.find(name);
              return it == params.end() ? nullptr : it->second;
            }
            if (slot == resumed.optimizer.end())
              return nullptr;
            for (const runtime::NamedTensor &t : slot->second)
              if (t.name == name)
                return &t;
            return nullptr;
          },
          e.parameter ? "the checkpoint's parameters"
                      : "the checkpoint's optimizer state '" + shardSlot + "'");
      std::string error;
      if (!block.isOk() || !model_.writeState(i, block.value(), error)) {
        printError(errs, kTrainCommand,
                   "--resume: " + (block.isOk() ? "shard '" + e.name + "' " + error
                                                : block.status().message()));
        return false;
      }
      continue;
    }
    if (e.parameter) {
      auto it = params.find(e.name);
      if (it == params.end()) {
        printError(errs, kTrainCommand, "--resume: the checkpoint has no parameter '" +
                                            e.name + "'");
        return false;
      }
      found = it->second;
      what = "parameter '" + e.name + "'";
    } else {
      auto [slot, name] = stateKey(e.name);
      auto s = resumed.optimizer.find(slot);
      if (s != resumed.optimizer.end())
        for (const runtime::NamedTensor &t : s->second)
          if (t.name == name)
            found = &t;
      if (!found) {
        printError(errs, kTrainCommand,
                   "--resume: the checkpoint has no optimizer state '" + slot +
                       "' of '" + name + "'");
        return false;
      }
      what = "optimizer state '" + e.name + "'";
    }
    std::string error;
    if (!model_.writeState(i, found->values, error)) {
      printError(errs, kTrainCommand, "--resume: " + what + " " + error);
      return false;
    }
  }
  return true;
}

bool TrainState::gatherParameters(size_t i, std::vector<runtime::NamedTensor> &out,
                                  llvm::raw_ostream &errs) {
  out.clear();
  const StateEntry &e = entries_[i];
  auto l = shardLayouts_.find(e.name);
  if (!communicator_ || !e.parameter || l == shardLayouts_.end() ||
      llvm::all_of(l->second->slots, [&](const runtime::ShardSlot &s) {
        return stateNames_.count(s.name) != 0;
      }))
    return true;
  std::vector<float> shard = model_.readState(i);
  std::vector<float> flat(shard.size() * env_.worldSize);
  runtime::Status g = communicator_->allGather(
      shard.data(), flat.data(), static_cast<int64_t>(shard.size()),
      runtime::PkgDType::F32);
  if (!g.isOk()) {
    printError(errs, kTrainCommand, g.message());
    return false;
  }
  for (const runtime::ShardSlot &slot : l->second->slots) {
    runtime::NamedTensor full;
    full.name = slot.name;
    full.shape = slot.shape;
    int64_t n = 1;
    for (int64_t d : slot.shape)
      n *= d;
    full.values.assign(flat.begin() + slot.offset,
                       flat.begin() + slot.offset + n);
    out.push_back(std::move(full));
  }
  return true;
}

bool TrainState::writeCheckpoint(const std::string &dir, const TrainPosition &at,
                                 uint64_t seed, llvm::raw_ostream &console,
                                 llvm::raw_ostream &errs) {
  bool leader = env_.rank == 0;
  bool sharded = this->sharded();
  int64_t stepsDone = at.step;
  runtime::TrainingState state;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const StateEntry &e = entries_[i];
    bool shardEntry =
        shardLayouts_.count(e.parameter ? e.name : stateKey(e.name).second);
    if (sharded && !leader && !shardEntry)
      continue;
    // zero3: the full parameters, gathered for rank 0's file.
    std::vector<runtime::NamedTensor> full;
    if (!gatherParameters(i, full, errs))
      return false;
    if (leader)
      for (runtime::NamedTensor &t : full)
        state.parameters.push_back(std::move(t));
    runtime::NamedTensor t;
    t.shape = e.shape;
    t.values = model_.readState(i);
    if (e.parameter) {
      t.name = e.name;
      state.parameters.push_back(std::move(t));
    } else {
      auto [slot, name] = stateKey(e.name);
      t.name = name;
      state.optimizer[slot].push_back(std::move(t));
    }
  }
  state.step = stepsDone;
  state.seed = seed;
  state.epoch = at.epoch;
  state.position = at.position;
  std::error_code ec = llvm::sys::fs::create_directories(dir);
  if (ec) {
    printError(errs, kTrainCommand, "--checkpoint-dir=" + dir +
                                        ": cannot create it: " + ec.message());
    return false;
  }
  std::string name =
      sharded ? runtime::shardFileName(stepsDone, env_.rank, env_.worldSize)
              : "step-" + std::to_string(stepsDone) + ".safetensors";
  runtime::Status saved = runtime::saveCheckpoint(dir + "/" + name, state);
  if (!saved.isOk())
    printError(errs, kTrainCommand, "checkpoint at step " + std::to_string(stepsDone) +
                                        ": " + saved.message() +
                                        " (earlier checkpoints are kept)");
  if (sharded) {
    // Every rank's file is on disk before the index names them: the
    // ranks count their failures together (a collective, so also a
    // barrier).
    float failed = saved.isOk() ? 0.0f : 1.0f, failures = failed;
    if (communicator_) {
      runtime::Status s = communicator_->allReduce(
          &failed, &failures, 1, runtime::PkgDType::F32,
          runtime::PkgReduceKind::Sum);
      if (!s.isOk()) {
        printError(errs, kTrainCommand, "checkpoint: " + s.message());
        return false;
      }
    }
    if (failures > 0) {
      if (leader && saved.isOk())
        printError(errs, kTrainCommand,
                   "checkpoint at step " + std::to_string(stepsDone) + ": " +
                       llvm::formatv("{0}", failures).str() +
                       " rank(s) could not write their file; no index "
                       "written (earlier checkpoints are kept)");
      return false;
    }
    if (!leader)
      return true;
    runtime::ShardedIndex index;
    index.step = stepsDone;
    index.worldSize = env_.worldSize;
    for (int r = 0; r < env_.worldSize; ++r)
      index.files.push_back(runtime::shardFileName(stepsDone, r, env_.worldSize));
    for (const runtime::ShardLayout &l : model_.shards())
      index.buckets.push_back(bucketOf(l));
    name = runtime::shardIndexFileName(stepsDone);
    runtime::Status written = runtime::writeFileAtomically(
        dir + "/" + name, runtime::writeShardIndex(index));
    if (!written.isOk()) {
      printError(errs, kTrainCommand, "checkpoint at step " +
                                          std::to_string(stepsDone) + ": " +
                                          written.message() +
                                          " (earlier checkpoints are kept)");
      return false;
    }
  } else if (!saved.isOk()) {
    return false;
  }
  // The pointer is replaced atomically: a temp file, then rename.
  std::string latest = dir + "/latest";
  std::string temp = latest + ".tmp";
  {
    std::error_code wec;
    llvm::raw_fd_ostream out(temp, wec);
    if (!wec) {
      out << name << "\n";
      out.close();
      wec = out.error();
    }
    if (wec || llvm::sys::fs::rename(temp, latest)) {
      printError(errs, kTrainCommand, latest + ": cannot write the pointer to " + name +
                                          (wec ? ": " + wec.message() : std::string()));
      return false;
    }
  }
  console << "kiln train: checkpoint " << dir << "/" << name << "\n";
  return true;
}

} // namespace kiln::cli
