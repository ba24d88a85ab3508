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
#include "runtime/checkpoint/Json.h"
#include "runtime/checkpoint/Sharded.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

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
    printError(errs, trainCommand(),
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
    printError(errs, trainCommand(), "--resume: " + state.status().message());
    return false;
  }
  resumed = std::move(state.value());
  if (!seed.empty() && options.seed != resumed->seed) {
    printError(errs, trainCommand(),
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
      runtime::StatusOr<runtime::TensorValues> block = runtime::shardBlock(
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
        printError(errs, trainCommand(),
                   "--resume: " + (block.isOk() ? "shard '" + e.name + "' " + error
                                                : block.status().message()));
        return false;
      }
      continue;
    }
    if (e.parameter) {
      auto it = params.find(e.name);
      if (it == params.end()) {
        printError(errs, trainCommand(), "--resume: the checkpoint has no parameter '" +
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
        printError(errs, trainCommand(),
                   "--resume: the checkpoint has no optimizer state '" + slot +
                       "' of '" + name + "'");
        return false;
      }
      what = "optimizer state '" + e.name + "'";
    }
    std::string error;
    if (!model_.writeState(i, found->values, error)) {
      printError(errs, trainCommand(), "--resume: " + what + " " + error);
      return false;
    }
  }
  return true;
}

namespace {

// "a, b, c and 2 more" (at most |shown| names).
std::string nameList(const std::vector<std::string> &names, size_t shown = 4) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < shown; ++i)
    out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > shown)
    out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

} // namespace

bool readInitialWeights(const TrainOptions &options,
                        std::optional<runtime::WeightsFile> &initial,
                        llvm::raw_ostream &errs) {
  if (options.initFrom.empty())
    return true;
  runtime::StatusOr<runtime::WeightsFile> weights =
      runtime::loadWeights(options.initFrom);
  if (!weights.isOk()) {
    printError(errs, trainCommand(), "--init-from: " + weights.status().message());
    return false;
  }
  initial = std::move(weights.value());
  return true;
}

bool TrainState::initialize(const runtime::WeightsFile &weights,
                            const std::string &path, bool strict,
                            std::string &summary, llvm::raw_ostream &errs) {
  auto fail = [&](const std::string &what) {
    printError(errs, trainCommand(), "--init-from=" + path + ": " + what);
    return false;
  };
  // The model's parameters, whole: a shard entry stands for its slots.
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected;
  std::set<std::string> expectedNames;
  auto expect = [&](const std::string &name, const std::vector<int64_t> &shape) {
    if (expectedNames.insert(name).second)
      expected.push_back({name, shape});
  };
  for (const StateEntry &e : entries_) {
    if (!e.parameter)
      continue;
    auto layout = shardLayouts_.find(e.name);
    if (layout == shardLayouts_.end()) {
      expect(e.name, e.shape);
      continue;
    }
    for (const runtime::ShardSlot &slot : layout->second->slots)
      expect(slot.name, slot.shape);
  }
  std::map<std::string, const runtime::NamedTensor *> found;
  for (const runtime::NamedTensor &t : weights.tensors)
    found[t.name] = &t;
  std::vector<std::string> missing, unused;
  for (const auto &[name, shape] : expected) {
    if (auto other = weights.otherDtypes.find(name);
        other != weights.otherDtypes.end())
      return fail("tensor '" + name + "' has dtype " + other->second +
                  ": the parameter needs F32, F64, F16 or BF16 values");
    auto it = found.find(name);
    if (it == found.end()) {
      missing.push_back(name);
      continue;
    }
    const std::vector<int64_t> &got = it->second->shape;
    if (got != shape) {
      std::string hint;
      if (shape.size() == 2 && got.size() == 2 && got[0] == shape[1] &&
          got[1] == shape[0])
        hint = " (its transpose: PyTorch's nn.Linear keeps its weight as "
               "[out, in] and a kiln dense weight is [in, out]; save "
               "weight.T)";
      return fail("tensor '" + name + "' has shape " + shapeText(got) +
                  ": the parameter is " + shapeText(shape) + hint);
    }
  }
  for (const runtime::NamedTensor &t : weights.tensors)
    if (!expectedNames.count(t.name))
      unused.push_back(t.name);
  // PyTorch's batch norms count their batches beside the running
  // statistics (an integer the momentum does not use): not model state
  // here, so such counters are left out whatever --init-strict says.
  int64_t counters = 0;
  for (const auto &[name, dtype] : weights.otherDtypes) {
    if (expectedNames.count(name))
      continue;
    if (llvm::StringRef(name).ends_with(".num_batches_tracked"))
      ++counters;
    else
      unused.push_back(name);
  }
  if (strict && !missing.empty())
    return fail("no tensor for the parameter" +
                std::string(missing.size() > 1 ? "s " : " ") + nameList(missing) +
                " (of " + std::to_string(expected.size()) +
                "); --init-strict=off keeps the initializers of those missing");
  if (strict && !unused.empty())
    return fail("tensor" + std::string(unused.size() > 1 ? "s " : " ") +
                nameList(unused) + " of the file " +
                (unused.size() > 1 ? "are" : "is") +
                " no parameter of the model; --init-strict=off ignores "
                "them");
  for (size_t i = 0; i < entries_.size(); ++i) {
    const StateEntry &e = entries_[i];
    if (!e.parameter)
      continue;
    std::string error;
    auto layout = shardLayouts_.find(e.name);
    if (layout == shardLayouts_.end()) {
      auto it = found.find(e.name);
      if (it != found.end() && !model_.writeState(i, it->second->values, error))
        return fail("parameter '" + e.name + "' " + error);
      continue;
    }
    // This rank's block of the bucket: the file's values where it has the
    // parameter, the block's own (its initializers) elsewhere.
    runtime::TensorValues current = model_.readState(i);
    runtime::StatusOr<runtime::TensorValues> block = runtime::shardBlock(
        bucketOf(*layout->second), env_.rank, env_.worldSize,
        [&](const std::string &name) -> const runtime::NamedTensor * {
          auto it = found.find(name);
          return it == found.end() ? nullptr : it->second;
        },
        "the file's parameters", &current);
    if (!block.isOk())
      return fail(block.status().message());
    if (!model_.writeState(i, block.value(), error))
      return fail("shard '" + e.name + "' " + error);
  }
  // Model state (running statistics) is counted apart from the parameters.
  int64_t stateExpected = 0, stateMissing = 0;
  for (const StateEntry &e : entries_)
    if (e.parameter && !e.trained) {
      ++stateExpected;
      stateMissing += llvm::is_contained(missing, e.name);
    }
  int64_t parametersExpected = static_cast<int64_t>(expected.size()) - stateExpected;
  int64_t parametersMissing = static_cast<int64_t>(missing.size()) - stateMissing;
  summary = path + " (" + weights.kind + "): " +
            std::to_string(parametersExpected - parametersMissing) + " of " +
            std::to_string(parametersExpected) + " parameters";
  if (stateExpected > 0)
    summary += ", " + std::to_string(stateExpected - stateMissing) + " of " +
               std::to_string(stateExpected) + " model state tensors";
  if (counters > 0)
    summary += "; " + std::to_string(counters) + " num_batches_tracked counter" +
               (counters > 1 ? "s" : "") + " ignored";
  if (!missing.empty())
    summary += "; " + nameList(missing) + " keep" +
               (missing.size() > 1 ? "" : "s") + " the initializer" +
               (missing.size() > 1 ? "s" : "");
  if (!unused.empty())
    summary += "; " + std::to_string(unused.size()) + " tensor" +
               (unused.size() > 1 ? "s" : "") + " of the file unused (" +
               nameList(unused) + ")";
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
  runtime::TensorValues shard = model_.readState(i);
  runtime::TensorValues flat =
      runtime::TensorValues::zeros(shard.wide(), shard.size() * env_.worldSize);
  runtime::Status g = communicator_->allGather(
      shard.data(), flat.data(), shard.size(),
      shard.wide() ? runtime::PkgDType::F64 : runtime::PkgDType::F32);
  if (!g.isOk()) {
    printError(errs, trainCommand(), g.message());
    return false;
  }
  for (const runtime::ShardSlot &slot : l->second->slots) {
    runtime::NamedTensor full;
    full.name = slot.name;
    full.shape = slot.shape;
    int64_t n = 1;
    for (int64_t d : slot.shape)
      n *= d;
    full.values = flat.slice(slot.offset, n);
    out.push_back(std::move(full));
  }
  return true;
}

namespace {

// Points |dir|/latest at |name|, atomically (a temporary file, then rename).
runtime::Status writeLatest(const std::string &dir, const std::string &name) {
  std::string latest = dir + "/latest";
  runtime::Status s = runtime::writeFileAtomically(latest, name + "\n");
  if (!s.isOk())
    return runtime::Status::error(latest + ": cannot write the pointer to " +
                                  name + ": " + s.message());
  return s;
}

} // namespace

// A checkpoint being written on a thread of its own (--checkpoint-async).
struct TrainState::Pending {
  std::string dir, name;
  int64_t step = 0;
  std::thread writer;
  std::atomic<bool> done{false};
  // Set by the writer before |done|.
  runtime::Status saved, pointer;
  double seconds = 0;
};

TrainState::~TrainState() {
  // A run that stops with an error still completes the write in flight
  // (its file is whole or absent; `latest` moves only after it is whole).
  if (pending_ && pending_->writer.joinable())
    pending_->writer.join();
}

bool TrainState::writeCheckpoint(const std::string &dir, const TrainPosition &at,
                                 uint64_t seed, llvm::raw_ostream &console,
                                 llvm::raw_ostream &errs) {
  // One write in flight at a time: the previous one first.
  if (!finishCheckpoint(console, errs))
    return false;
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
    printError(errs, trainCommand(), "--checkpoint-dir=" + dir +
                                        ": cannot create it: " + ec.message());
    return false;
  }
  std::string name =
      sharded ? runtime::shardFileName(stepsDone, env_.rank, env_.worldSize)
              : checkpointName(stepsDone);
  if (async_) {
    // The state is this copy: the steps go on while a thread writes it
    // (and, on one rank, the pointer); finishCheckpoint reports it.
    pending_ = std::make_unique<Pending>();
    Pending &p = *pending_;
    p.dir = dir;
    p.name = name;
    p.step = stepsDone;
    p.writer = std::thread([&p, sharded, state = std::move(state)] {
      auto start = std::chrono::steady_clock::now();
      p.saved = runtime::saveCheckpoint(p.dir + "/" + p.name, state);
      if (p.saved.isOk() && !sharded)
        p.pointer = writeLatest(p.dir, p.name);
      p.seconds = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start)
                      .count();
      p.done = true;
    });
    return true;
  }
  runtime::Status saved = runtime::saveCheckpoint(dir + "/" + name, state);
  return commit(dir, stepsDone, name, saved, std::nullopt, "", console, errs);
}

std::string TrainState::checkpointName(int64_t step) const {
  return sharded() ? runtime::shardIndexFileName(step)
                   : "step-" + std::to_string(step) + ".safetensors";
}

bool writeBestCheckpoint(const std::string &dir, const BestCheckpoint &best,
                         llvm::raw_ostream &console, llvm::raw_ostream &errs) {
  std::string text = "{\"checkpoint\": ";
  runtime::json::writeString(text, best.checkpoint);
  text += ", \"step\": " + std::to_string(best.step) +
          ", \"eval_loss\": " + llvm::formatv("{0:e9}", best.evalLoss).str() +
          "}\n";
  std::string path = dir + "/best.json";
  if (runtime::Status s = runtime::writeFileAtomically(path, text); !s.isOk()) {
    printError(errs, trainCommand(), "--checkpoint-best: " + s.message());
    return false;
  }
  console << trainCommand() << ": best eval loss so far ("
          << llvm::format("%.6f", best.evalLoss) << "): " << path << " names "
          << best.checkpoint << "\n";
  return true;
}

std::optional<BestCheckpoint> readBestCheckpoint(const std::string &dir,
                                                 llvm::raw_ostream &errs) {
  std::string path = dir + "/best.json";
  std::ifstream in(path);
  if (!in)
    return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  runtime::StatusOr<runtime::json::Value> doc = runtime::json::parse(text);
  const runtime::json::Value *name =
      doc.isOk() ? doc->find("checkpoint") : nullptr;
  const runtime::json::Value *step = doc.isOk() ? doc->find("step") : nullptr;
  const runtime::json::Value *loss =
      doc.isOk() ? doc->find("eval_loss") : nullptr;
  using Kind = runtime::json::Value::Kind;
  if (!name || name->kind != Kind::string || !step ||
      step->kind != Kind::integer || !loss ||
      (loss->kind != Kind::number && loss->kind != Kind::integer)) {
    errs << trainCommand() << ": warning: " << path
         << " is not a --checkpoint-best record (expected checkpoint, step "
            "and eval_loss); the best starts again\n";
    return std::nullopt;
  }
  return BestCheckpoint{name->string, step->integer, loss->number};
}

bool TrainState::checkpointWritten() const {
  // A sharded checkpoint is committed with a collective, so only where
  // every rank calls finishCheckpoint.
  return pending_ && !sharded() && pending_->done;
}

bool TrainState::finishCheckpoint(llvm::raw_ostream &console,
                                  llvm::raw_ostream &errs) {
  if (!pending_)
    return true;
  std::unique_ptr<Pending> p = std::move(pending_);
  p->writer.join();
  return commit(
      p->dir, p->step, p->name, p->saved,
      sharded() ? std::nullopt : std::optional(p->pointer),
      llvm::formatv(" (written in the background in {0:f2} s)", p->seconds)
          .str(),
      console, errs);
}

bool TrainState::commit(const std::string &dir, int64_t stepsDone,
                        std::string name, const runtime::Status &saved,
                        const std::optional<runtime::Status> &pointer,
                        const std::string &how, llvm::raw_ostream &console,
                        llvm::raw_ostream &errs) {
  bool leader = env_.rank == 0;
  bool sharded = this->sharded();
  if (!saved.isOk())
    printError(errs, trainCommand(), "checkpoint at step " + std::to_string(stepsDone) +
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
        printError(errs, trainCommand(), "checkpoint: " + s.message());
        return false;
      }
    }
    if (failures > 0) {
      if (leader && saved.isOk())
        printError(errs, trainCommand(),
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
      printError(errs, trainCommand(), "checkpoint at step " +
                                          std::to_string(stepsDone) + ": " +
                                          written.message() +
                                          " (earlier checkpoints are kept)");
      return false;
    }
  } else if (!saved.isOk()) {
    return false;
  }
  // The pointer moves once the checkpoint is whole (on one rank an
  // asynchronous write moved it already).
  runtime::Status moved = pointer ? *pointer : writeLatest(dir, name);
  if (!moved.isOk()) {
    printError(errs, trainCommand(), moved.message());
    return false;
  }
  console << trainCommand() << ": checkpoint " << dir << "/" << name << how
          << "\n";
  prune(dir, stepsDone, console, errs);
  return true;
}

void TrainState::prune(const std::string &dir, int64_t step,
                       llvm::raw_ostream &console, llvm::raw_ostream &errs) {
  // Rank 0, once `latest` names the new checkpoint: every rank's files are
  // in |dir| (a sharded checkpoint's index names them there).
  if (keep_ <= 0 || env_.rank != 0)
    return;
  // The checkpoint files of each step up to |step|: step-K.safetensors,
  // step-K.index.json and step-K.rank-R-of-W.safetensors.
  std::map<int64_t, std::vector<std::string>> files;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (!name.consume_front("step-"))
      continue;
    size_t digits = name.find_first_not_of("0123456789");
    int64_t k = 0;
    if (digits == 0 || digits == llvm::StringRef::npos ||
        name.take_front(digits).getAsInteger(10, k) || k > step)
      continue;
    llvm::StringRef rest = name.drop_front(digits);
    int rank = 0, world = 0;
    bool shard = rest.consume_front(".rank-") &&
                 !rest.consumeInteger(10, rank) && rest.consume_front("-of-") &&
                 !rest.consumeInteger(10, world) && rest == ".safetensors";
    if (shard || rest == ".safetensors" || rest == ".index.json")
      files[k].push_back(it->path());
  }
  if (ec) {
    printError(errs, trainCommand(),
               "--keep-checkpoints: cannot list " + dir + ": " + ec.message() +
                   " (nothing deleted)");
    return;
  }
  int64_t kept = 0;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    if (++kept <= keep_ || it->first == best_)
      continue;
    std::sort(it->second.begin(), it->second.end());
    for (const std::string &path : it->second) {
      if (std::error_code rm = llvm::sys::fs::remove(path))
        printError(errs, trainCommand(),
                   "--keep-checkpoints: cannot delete " + path + ": " +
                       rm.message());
      else
        console << trainCommand() << ": deleted " << path
                << " (--keep-checkpoints=" << keep_ << ")\n";
    }
  }
}

} // namespace kiln::cli
