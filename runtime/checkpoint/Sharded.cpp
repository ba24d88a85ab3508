//===- Sharded.cpp - ZeRO checkpoints: one file per rank and an index -----===//
//
// See Sharded.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Sharded.h"

#include "runtime/Files.h"
#include "runtime/checkpoint/Json.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

namespace kiln::runtime {
namespace {

int64_t elements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string directoryOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

} // namespace

std::string shardFileName(int64_t step, int rank, int worldSize) {
  return "step-" + std::to_string(step) + ".rank-" + std::to_string(rank) +
         "-of-" + std::to_string(worldSize) + ".safetensors";
}

std::string shardIndexFileName(int64_t step) {
  return "step-" + std::to_string(step) + ".index.json";
}

bool isShardIndexName(const std::string &name) {
  const std::string suffix = ".index.json";
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t shardLength(int64_t length, int worldSize) {
  return (length + worldSize - 1) / worldSize;
}

std::string writeShardIndex(const ShardedIndex &index) {
  std::string out = "{\n  \"format\": ";
  json::writeString(out, kShardedCheckpointFormat);
  out += ",\n  \"step\": " + std::to_string(index.step) +
         ",\n  \"world_size\": " + std::to_string(index.worldSize) +
         ",\n  \"files\": [";
  for (size_t i = 0; i < index.files.size(); ++i) {
    out += i ? ", " : "";
    json::writeString(out, index.files[i]);
  }
  out += "],\n  \"buckets\": [";
  for (size_t b = 0; b < index.buckets.size(); ++b) {
    const ShardedBucket &bucket = index.buckets[b];
    out += b ? ",\n    {\"name\": " : "\n    {\"name\": ";
    json::writeString(out, bucket.name);
    out += ", \"length\": " + std::to_string(bucket.length) + ", \"params\": [";
    for (size_t p = 0; p < bucket.params.size(); ++p) {
      const ShardedParam &param = bucket.params[p];
      out += p ? ",\n      {\"name\": " : "\n      {\"name\": ";
      json::writeString(out, param.name);
      out += ", \"offset\": " + std::to_string(param.offset) + ", \"shape\": [";
      for (size_t d = 0; d < param.shape.size(); ++d)
        out += (d ? ", " : "") + std::to_string(param.shape[d]);
      out += "]}";
    }
    out += "]}";
  }
  out += "\n  ]\n}\n";
  return out;
}

StatusOr<ShardedIndex> parseShardIndex(const std::string &text,
                                       const std::string &path) {
  StatusOr<json::Value> parsed = json::parse(text);
  if (!parsed.isOk())
    return Status::error(path + ": " + parsed.status().message());
  const json::Value &root = parsed.value();
  auto bad = [&](const std::string &what) {
    return Status::error(path + ": expected " + what +
                         " (a kiln sharded checkpoint index)");
  };
  const json::Value *format = root.find("format");
  if (!format || format->kind != json::Value::Kind::string ||
      format->string != kShardedCheckpointFormat)
    return bad(std::string("\"format\": \"") + kShardedCheckpointFormat + "\"");
  ShardedIndex index;
  const json::Value *step = root.find("step");
  const json::Value *world = root.find("world_size");
  const json::Value *files = root.find("files");
  const json::Value *buckets = root.find("buckets");
  if (!step || step->kind != json::Value::Kind::integer)
    return bad("an integer \"step\"");
  if (!world || world->kind != json::Value::Kind::integer || world->integer < 1)
    return bad("a positive integer \"world_size\"");
  index.step = step->integer;
  index.worldSize = static_cast<int>(world->integer);
  if (!files || files->kind != json::Value::Kind::array ||
      static_cast<int64_t>(files->array.size()) != world->integer)
    return bad("\"files\": one file name per rank (" +
               std::to_string(world->integer) + ")");
  for (const json::Value &f : files->array) {
    if (f.kind != json::Value::Kind::string || f.string.empty() ||
        f.string.find('/') != std::string::npos)
      return bad("\"files\" to hold file names in the index's directory");
    index.files.push_back(f.string);
  }
  if (!buckets || buckets->kind != json::Value::Kind::array)
    return bad("a \"buckets\" array");
  for (const json::Value &b : buckets->array) {
    const json::Value *name = b.find("name");
    const json::Value *length = b.find("length");
    const json::Value *params = b.find("params");
    if (!name || name->kind != json::Value::Kind::string || !length ||
        length->kind != json::Value::Kind::integer || length->integer < 1 ||
        !params || params->kind != json::Value::Kind::array)
      return bad("each bucket to have a name, a positive length and params");
    ShardedBucket bucket;
    bucket.name = name->string;
    bucket.length = length->integer;
    int64_t next = 0;
    for (const json::Value &p : params->array) {
      const json::Value *pname = p.find("name");
      const json::Value *offset = p.find("offset");
      const json::Value *shape = p.find("shape");
      if (!pname || pname->kind != json::Value::Kind::string || !offset ||
          offset->kind != json::Value::Kind::integer || !shape ||
          shape->kind != json::Value::Kind::array)
        return bad("each parameter of bucket '" + bucket.name +
                   "' to have a name, an offset and a shape");
      ShardedParam param;
      param.name = pname->string;
      param.offset = offset->integer;
      for (const json::Value &d : shape->array) {
        if (d.kind != json::Value::Kind::integer || d.integer < 0)
          return bad("the shape of '" + param.name + "' to be sizes");
        param.shape.push_back(d.integer);
      }
      if (param.offset != next)
        return bad("parameter '" + param.name + "' of bucket '" + bucket.name +
                   "' at offset " + std::to_string(next) + ", not " +
                   std::to_string(param.offset));
      next += elements(param.shape);
      bucket.params.push_back(std::move(param));
    }
    if (next != bucket.length)
      return bad("bucket '" + bucket.name + "' to hold " +
                 std::to_string(bucket.length) + " elements, its parameters hold " +
                 std::to_string(next));
    index.buckets.push_back(std::move(bucket));
  }
  return index;
}

StatusOr<TensorValues>
shardBlock(const ShardedBucket &bucket, int rank, int worldSize,
           const std::function<const NamedTensor *(const std::string &)> &find,
           const std::string &what, const TensorValues *base) {
  int64_t per = shardLength(bucket.length, worldSize);
  int64_t begin = per * rank, end = begin + per;
  if (base && base->size() != per)
    return Status::error(what + ": the block of " + bucket.name + " holds " +
                         std::to_string(base->size()) + " values, expected " +
                         std::to_string(per));
  std::vector<const NamedTensor *> tensors;
  bool wide = base && base->wide();
  for (const ShardedParam &p : bucket.params) {
    int64_t n = elements(p.shape);
    const NamedTensor *t = find(p.name);
    tensors.push_back(t);
    if (!t && base)
      continue;
    if (!t)
      return Status::error(what + ": no '" + p.name + "' (of " + bucket.name +
                           ")");
    if (t->values.size() != n)
      return Status::error(what + ": '" + p.name + "' holds " +
                           std::to_string(t->values.size()) +
                           " values, expected " + std::to_string(n));
    wide |= t->values.wide();
  }
  TensorValues out = TensorValues::zeros(wide, per);
  if (base)
    out.copyFrom(*base, 0, per, 0);
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const ShardedParam &p = bucket.params[k];
    int64_t lo = std::max(begin, p.offset),
            hi = std::min(end, p.offset + elements(p.shape));
    if (tensors[k] && lo < hi)
      out.copyFrom(tensors[k]->values, lo - p.offset, hi - lo, lo - begin);
  }
  return out;
}

StatusOr<TrainingState>
consolidateShards(const ShardedIndex &index,
                  const std::vector<TrainingState> &ranks,
                  const std::string &indexPath) {
  if (static_cast<int>(ranks.size()) != index.worldSize)
    return Status::error(indexPath + ": expected " +
                         std::to_string(index.worldSize) + " rank files, got " +
                         std::to_string(ranks.size()));
  std::map<std::string, const ShardedBucket *> buckets;
  for (const ShardedBucket &b : index.buckets)
    buckets[b.name] = &b;
  // Everything that is not a shard comes from rank 0 as it is.
  TrainingState out = ranks.front();
  out.parameters.clear();
  out.optimizer.clear();
  for (const NamedTensor &t : ranks.front().parameters)
    if (!buckets.count(t.name))
      out.parameters.push_back(t);
  for (const auto &[slot, tensors] : ranks.front().optimizer)
    for (const NamedTensor &t : tensors)
      if (!buckets.count(t.name))
        out.optimizer[slot].push_back(t);
  // The flat bucket of |slot| ("" : the parameters) from every rank's block;
  // f64 when any rank's block is.
  auto gather = [&](const ShardedBucket &b, const std::string &slot,
                    TensorValues &flat) -> Status {
    int64_t per = shardLength(b.length, index.worldSize);
    std::vector<const NamedTensor *> blocks;
    bool wide = false;
    for (int r = 0; r < index.worldSize; ++r) {
      const NamedTensor *found = nullptr;
      if (slot.empty()) {
        for (const NamedTensor &t : ranks[r].parameters)
          if (t.name == b.name)
            found = &t;
      } else if (auto s = ranks[r].optimizer.find(slot);
                 s != ranks[r].optimizer.end()) {
        for (const NamedTensor &t : s->second)
          if (t.name == b.name)
            found = &t;
      }
      std::string what = slot.empty() ? "shard '" + b.name + "'"
                                      : "optimizer state '" + slot +
                                            "' of shard '" + b.name + "'";
      if (!found)
        return Status::error(indexPath + ": " + index.files[r] + " has no " +
                             what);
      if (found->values.size() != per)
        return Status::error(indexPath + ": " + index.files[r] + ": " + what +
                             " holds " + std::to_string(found->values.size()) +
                             " values, expected " + std::to_string(per) +
                             " (length " + std::to_string(b.length) +
                             " over " + std::to_string(index.worldSize) +
                             " ranks)");
      blocks.push_back(found);
      wide |= found->values.wide();
    }
    flat = TensorValues::zeros(wide, per * index.worldSize);
    for (int r = 0; r < index.worldSize; ++r)
      flat.copyFrom(blocks[r]->values, 0, per, per * r);
    return Status::ok();
  };
  auto cut = [&](const ShardedBucket &b, const TensorValues &flat,
                 std::vector<NamedTensor> &into) {
    for (const ShardedParam &p : b.params) {
      NamedTensor t;
      t.name = p.name;
      t.shape = p.shape;
      t.values = flat.slice(p.offset, elements(p.shape));
      // A full copy the rank-0 file already holds (zero1/2) is replaced by
      // the one cut from the shards: they are equal.
      for (auto it = into.begin(); it != into.end(); ++it)
        if (it->name == p.name) {
          into.erase(it);
          break;
        }
      into.push_back(std::move(t));
    }
  };
  for (const ShardedBucket &b : index.buckets) {
    TensorValues flat;
    if (Status s = gather(b, "", flat); !s.isOk())
      return s;
    cut(b, flat, out.parameters);
    // Every optimizer slot rank 0 has for this shard.
    for (const auto &[slot, tensors] : ranks.front().optimizer) {
      bool has = false;
      for (const NamedTensor &t : tensors)
        has |= t.name == b.name;
      if (!has)
        continue;
      if (Status s = gather(b, slot, flat); !s.isOk())
        return s;
      cut(b, flat, out.optimizer[slot]);
    }
  }
  return out;
}

StatusOr<TrainingState> loadShardedCheckpoint(const std::string &indexPath) {
  std::ifstream in(indexPath);
  if (!in)
    return Status::error(indexPath + ": cannot open the checkpoint index: " +
                         std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  StatusOr<ShardedIndex> index = parseShardIndex(text.str(), indexPath);
  if (!index.isOk())
    return index.status();
  std::vector<TrainingState> ranks;
  std::string dir = directoryOf(indexPath);
  for (int r = 0; r < index->worldSize; ++r) {
    std::string path = dir + "/" + index->files[r];
    StatusOr<TrainingState> state = loadCheckpoint(path);
    if (!state.isOk())
      return Status::error(indexPath + ": rank " + std::to_string(r) +
                           " of " + std::to_string(index->worldSize) + ": " +
                           state.status().message());
    if (state->step != index->step)
      return Status::error(path + ": holds step " +
                           std::to_string(state->step) + ", the index " +
                           indexPath + " step " + std::to_string(index->step));
    ranks.push_back(std::move(state.value()));
  }
  return consolidateShards(index.value(), ranks, indexPath);
}

} // namespace kiln::runtime
