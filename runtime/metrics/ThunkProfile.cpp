//===- ThunkProfile.cpp - a step's per-thunk times, as CSV or a trace -----===//

#include "runtime/metrics/ThunkProfile.h"

#include "runtime/checkpoint/Json.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace kiln::runtime {
namespace {

std::string number(double v, const char *format = "%.6f") {
  char text[64];
  std::snprintf(text, sizeof(text), format, v);
  return text;
}

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool isCollective(const std::string &kind) {
  return kind == "all_reduce" || kind == "all_gather" ||
         kind == "reduce_scatter" || kind == "collective_broadcast";
}

} // namespace

bool isThunkTracePath(const std::string &path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
}

std::string thunkProfileCsv(const std::vector<ThunkTime> &rows) {
  std::string csv = "thunk,ms,calls,kind,what\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const ThunkTime &t = rows[i];
    std::string what;
    for (char c : t.what)
      what += c == '"' ? std::string("\"\"") : std::string(1, c);
    csv += std::to_string(i) + "," + number(t.msPerStep()) + "," +
           std::to_string(t.calls) + "," + t.kind + ",\"" + what + "\"\n";
  }
  return csv;
}

std::string thunkProfileTrace(const std::vector<ThunkTime> &rows,
                              const std::string &title,
                              const std::vector<HostSpan> &host,
                              double thunksAtMs) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  std::vector<std::string> events;
  auto meta = [&](const char *name, int tid, const std::string &value) {
    std::string e =
        "{\"name\": \"" + std::string(name) +
        "\", \"ph\": \"M\", \"pid\": 0, \"tid\": " + std::to_string(tid) +
        ", \"args\": {\"name\": ";
    json::writeString(e, value);
    events.push_back(e + "}}");
  };
  meta("process_name", 0, title);
  meta("thread_name", 0, "thunks");
  meta("thread_name", 1, "collectives");
  if (!host.empty())
    meta("thread_name", 2, "host");
  for (const HostSpan &h : host) {
    std::string e = "{\"name\": ";
    json::writeString(e, h.name);
    events.push_back(e + ", \"cat\": \"host\", \"ph\": \"X\", \"ts\": " +
                     number(h.startMs * 1000, "%.3f") + ", \"dur\": " +
                     number(h.ms * 1000, "%.3f") + ", \"pid\": 0, \"tid\": 2}");
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const ThunkTime &t = rows[i];
    std::string e = "{\"name\": ";
    json::writeString(e, t.what);
    e += ", \"cat\": ";
    json::writeString(e, t.kind);
    events.push_back(
        e + ", \"ph\": \"X\", \"ts\": " +
        number((thunksAtMs + t.lastStartMs) * 1000, "%.3f") +
        ", \"dur\": " + number(t.lastMs * 1000, "%.3f") +
        ", \"pid\": 0, \"tid\": " + (isCollective(t.kind) ? "1" : "0") +
        ", \"args\": {\"thunk\": " + std::to_string(i) +
        ", \"calls\": " + std::to_string(t.calls) +
        ", \"mean_ms\": " + number(t.msPerStep()) + "}}");
  }
  for (size_t i = 0; i < events.size(); ++i)
    out += events[i] + (i + 1 < events.size() ? ",\n" : "\n");
  return out + "]}\n";
}

StatusOr<std::vector<std::pair<size_t, double>>>
readThunkProfile(const std::string &text) {
  std::vector<std::pair<size_t, double>> out;
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    StatusOr<json::Value> doc = json::parse(text);
    if (!doc.isOk())
      return Status::error("not a trace: " + doc.status().message());
    const json::Value *events = doc->find("traceEvents");
    if (!events || events->kind != json::Value::Kind::array)
      return Status::error("a trace without traceEvents");
    for (const json::Value &e : events->array) {
      const json::Value *ph = e.find("ph");
      const json::Value *cat = e.find("cat");
      if (!ph || ph->string != "X" || (cat && cat->string == "host"))
        continue;
      const json::Value *args = e.find("args");
      const json::Value *thunk = args ? args->find("thunk") : nullptr;
      const json::Value *ms = args ? args->find("mean_ms") : nullptr;
      if (!thunk || thunk->kind != json::Value::Kind::integer ||
          thunk->integer < 0 || !ms ||
          (ms->kind != json::Value::Kind::number &&
           ms->kind != json::Value::Kind::integer) ||
          !(ms->number >= 0))
        return Status::error("trace event " + std::to_string(out.size()) +
                             ": expected args.thunk and args.mean_ms "
                             "(kiln train --profile=FILE.json)");
      out.push_back({size_t(thunk->integer), ms->number});
    }
    return out;
  }
  std::istringstream lines(text);
  std::string line;
  for (size_t n = 1; std::getline(lines, line); ++n) {
    line = trim(line);
    if (line.empty() || (n == 1 && line.rfind("thunk", 0) == 0))
      continue;
    std::string where = "line " + std::to_string(n) + " ('" + line + "')";
    // THUNK,MS, maybe with more columns after them.
    size_t comma = line.find(',');
    std::string index = trim(line.substr(0, comma));
    std::string ms =
        comma == std::string::npos
            ? ""
            : trim(line.substr(comma + 1,
                               line.find(',', comma + 1) - comma - 1));
    char *end = nullptr;
    unsigned long long thunk = std::strtoull(index.c_str(), &end, 10);
    bool badIndex = index.empty() || *end || index[0] == '-';
    double value = std::strtod(ms.c_str(), &end);
    if (badIndex || ms.empty() || *end || !(value >= 0))
      return Status::error(where + ": expected THUNK,MILLISECONDS");
    out.push_back({size_t(thunk), value});
  }
  return out;
}

} // namespace kiln::runtime
