//===- Env.cpp - where this process stands in a distributed job ----------===//
//
// Reads the launcher's environment: torchrun's variables first (what `kiln
// launch` sets), then TensorFlow's TF_CONFIG. Every value is checked, and a
// bad one comes back as an error naming the variable and what was expected,
// so a typo in a launch script fails at once instead of at rendezvous.
//
//===----------------------------------------------------------------------===//

#include "runtime/dist/Communicator.h"

#include "runtime/checkpoint/Json.h"

#include <cerrno>
#include <cstdlib>
#include <optional>

namespace kiln::runtime::dist {

Communicator::~Communicator() = default;

namespace {

std::optional<std::string> getEnv(const char *name) {
  const char *v = std::getenv(name);
  if (!v)
    return std::nullopt;
  return std::string(v);
}

// |text| as a decimal integer in [|lo|, |hi|].
StatusOr<int> parseInt(const std::string &name, const std::string &text,
                       long lo, long hi) {
  const char *begin = text.c_str();
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(begin, &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    return Status::error(name + "='" + text + "': expected an integer in [" +
                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int>(v);
}

// Splits "host:port" (the host may be a bracketed IPv6 address).
Status splitHostPort(const std::string &where, const std::string &text,
                     std::string &host, int &port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return Status::error(where + ": '" + text + "': expected host:port");
  host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  StatusOr<int> p = parseInt(where + " port", text.substr(colon + 1), 1, 65535);
  if (!p.isOk())
    return p.status();
  port = p.value();
  return Status::ok();
}

Status checkEnv(const DistEnv &env) {
  if (env.rank >= env.worldSize)
    return Status::error("RANK=" + std::to_string(env.rank) +
                         " is not below WORLD_SIZE=" +
                         std::to_string(env.worldSize));
  if (env.localRank >= env.localWorldSize)
    return Status::error("LOCAL_RANK=" + std::to_string(env.localRank) +
                         " is not below LOCAL_WORLD_SIZE=" +
                         std::to_string(env.localWorldSize));
  if (env.localWorldSize > env.worldSize)
    return Status::error("LOCAL_WORLD_SIZE=" +
                         std::to_string(env.localWorldSize) +
                         " is larger than WORLD_SIZE=" +
                         std::to_string(env.worldSize));
  if (env.masterAddr.empty())
    return Status::error("MASTER_ADDR is empty");
  return Status::ok();
}

} // namespace

StatusOr<DistEnv> distEnvFromTfConfig(const std::string &tfConfig) {
  StatusOr<json::Value> parsed = json::parse(tfConfig);
  if (!parsed.isOk())
    return Status::error("TF_CONFIG: " + parsed.status().message());
  const json::Value &root = parsed.value();
  using Kind = json::Value::Kind;
  if (root.kind != Kind::object)
    return Status::error("TF_CONFIG: expected a JSON object");
  const json::Value *cluster = root.find("cluster");
  const json::Value *task = root.find("task");
  if (!cluster || cluster->kind != Kind::object)
    return Status::error("TF_CONFIG: expected an object \"cluster\"");
  if (!task || task->kind != Kind::object)
    return Status::error("TF_CONFIG: expected an object \"task\"");

  // Ranks: the chief (if any) first, then the workers in order.
  std::vector<std::string> members;
  size_t chiefs = 0;
  for (const char *type : {"chief", "worker"}) {
    const json::Value *list = cluster->find(type);
    if (!list)
      continue;
    if (list->kind != Kind::array)
      return Status::error(std::string("TF_CONFIG: cluster.") + type +
                           ": expected an array of \"host:port\" strings");
    for (const json::Value &v : list->array) {
      if (v.kind != Kind::string)
        return Status::error(std::string("TF_CONFIG: cluster.") + type +
                             ": expected an array of \"host:port\" strings");
      members.push_back(v.string);
    }
    if (std::string(type) == "chief")
      chiefs = members.size();
  }
  if (members.empty())
    return Status::error(
        "TF_CONFIG: cluster has no \"worker\" (or \"chief\") entries");
  if (chiefs > 1)
    return Status::error("TF_CONFIG: cluster.chief has " +
                         std::to_string(chiefs) + " entries, expected 1");

  const json::Value *type = task->find("type");
  const json::Value *index = task->find("index");
  if (!type || type->kind != Kind::string ||
      (type->string != "worker" && type->string != "chief"))
    return Status::error("TF_CONFIG: task.type: expected \"worker\" or "
                         "\"chief\" (kiln runs no parameter servers or "
                         "evaluators)");
  size_t count = type->string == "chief" ? chiefs : members.size() - chiefs;
  int64_t i = index ? index->integer : 0;
  if (index && index->kind != Kind::integer)
    return Status::error("TF_CONFIG: task.index: expected an integer");
  if (i < 0 || static_cast<size_t>(i) >= count)
    return Status::error("TF_CONFIG: task.index " + std::to_string(i) +
                         " is not below the " + std::to_string(count) + " " +
                         type->string + " entries");

  DistEnv env;
  env.rank = static_cast<int>(type->string == "chief" ? i : chiefs + i);
  env.worldSize = static_cast<int>(members.size());
  std::vector<std::string> hosts(members.size());
  for (size_t r = 0; r < members.size(); ++r) {
    int port = 0;
    if (Status s = splitHostPort("TF_CONFIG: rank " + std::to_string(r),
                                 members[r], hosts[r], port);
        !s.isOk())
      return s;
    if (r == 0) {
      env.masterAddr = hosts[0];
      env.masterPort = port;
    }
  }
  // Local ranks: the members on this member's host, in rank order.
  env.localRank = 0;
  env.localWorldSize = 0;
  for (size_t r = 0; r < members.size(); ++r) {
    if (hosts[r] != hosts[env.rank])
      continue;
    if (static_cast<int>(r) < env.rank)
      ++env.localRank;
    ++env.localWorldSize;
  }
  if (Status s = checkEnv(env); !s.isOk())
    return Status::error("TF_CONFIG: " + s.message());
  return env;
}

StatusOr<DistEnv> distEnvFromEnvironment() {
  std::optional<std::string> rank = getEnv("RANK"),
                             world = getEnv("WORLD_SIZE");
  if (!rank && !world) {
    if (std::optional<std::string> tf = getEnv("TF_CONFIG"); tf && !tf->empty())
      return distEnvFromTfConfig(*tf);
  }
  DistEnv env;
  if (rank.has_value() != world.has_value())
    return Status::error(rank ? "RANK is set but WORLD_SIZE is not"
                              : "WORLD_SIZE is set but RANK is not");
  constexpr long kMaxRanks = 1 << 20;
  if (world) {
    StatusOr<int> w = parseInt("WORLD_SIZE", *world, 1, kMaxRanks);
    if (!w.isOk())
      return w.status();
    env.worldSize = w.value();
    StatusOr<int> r = parseInt("RANK", *rank, 0, kMaxRanks);
    if (!r.isOk())
      return r.status();
    env.rank = r.value();
  }
  // Without LOCAL_*: every rank on this host.
  env.localRank = env.rank;
  env.localWorldSize = env.worldSize;
  if (std::optional<std::string> v = getEnv("LOCAL_RANK")) {
    StatusOr<int> r = parseInt("LOCAL_RANK", *v, 0, kMaxRanks);
    if (!r.isOk())
      return r.status();
    env.localRank = r.value();
  }
  if (std::optional<std::string> v = getEnv("LOCAL_WORLD_SIZE")) {
    StatusOr<int> r = parseInt("LOCAL_WORLD_SIZE", *v, 1, kMaxRanks);
    if (!r.isOk())
      return r.status();
    env.localWorldSize = r.value();
  }
  if (std::optional<std::string> v = getEnv("MASTER_ADDR"))
    env.masterAddr = *v;
  if (std::optional<std::string> v = getEnv("MASTER_PORT")) {
    StatusOr<int> p = parseInt("MASTER_PORT", *v, 1, 65535);
    if (!p.isOk())
      return p.status();
    env.masterPort = p.value();
  }
  if (Status s = checkEnv(env); !s.isOk())
    return s;
  return env;
}

} // namespace kiln::runtime::dist
