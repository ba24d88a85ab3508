//===- ThunkProfileTest.cpp - per-thunk profiles as CSV and traces --------===//
//
// runtime/metrics/ThunkProfile.h: what kiln train --profile and
// kiln-cuda-run --profile write, read back as kiln inspect --measured reads
// it: the CSV (and kiln-cuda-run's older two columns) and the Chrome trace
// give each thunk's milliseconds per step; the trace's events sit where the
// thunks ran, collectives on their own row, kiln train's host spans on
// theirs, names escaped; bad files are
// refused with where and what was expected.
//
//===----------------------------------------------------------------------===//

#include "runtime/metrics/ThunkProfile.h"
#include "runtime/checkpoint/Json.h"

#include <gtest/gtest.h>

namespace kiln::runtime {
namespace {

std::vector<ThunkTime> sample() {
  ThunkTime gemm{"gemm", "gemm m=8 n=16 k=784 batch=1", 6.0, 4, 0.0, 1.5};
  ThunkTime kernel{"kernel", "kernel 'fusion\"0', kiln_kernel\\x", 2.0, 4, 1.5,
                   0.25};
  ThunkTime reduce{"all_reduce", "all_reduce", 1.0, 4, 0.5, 0.75};
  return {gemm, kernel, reduce};
}

TEST(ThunkProfile, CsvGivesMillisecondsPerStep) {
  std::string csv = thunkProfileCsv(sample());
  EXPECT_EQ(csv,
            "thunk,ms,calls,kind,what\n"
            "0,1.500000,4,gemm,\"gemm m=8 n=16 k=784 batch=1\"\n"
            "1,0.500000,4,kernel,\"kernel 'fusion\"\"0', kiln_kernel\\x\"\n"
            "2,0.250000,4,all_reduce,\"all_reduce\"\n");
  auto times = readThunkProfile(csv);
  ASSERT_TRUE(times.isOk()) << times.status().message();
  EXPECT_EQ(times.value(), (std::vector<std::pair<size_t, double>>{
                               {0, 1.5}, {1, 0.5}, {2, 0.25}}));
  // kiln-cuda-run's two columns.
  times = readThunkProfile("thunk,ms\n0,0.010\n7,2\n");
  ASSERT_TRUE(times.isOk()) << times.status().message();
  EXPECT_EQ(times.value(),
            (std::vector<std::pair<size_t, double>>{{0, 0.010}, {7, 2.0}}));
}

TEST(ThunkProfile, TraceHoldsTheLastStepsTimeline) {
  std::string text = thunkProfileTrace(sample(), "kiln train: step 7");
  StatusOr<json::Value> doc = json::parse(text);
  ASSERT_TRUE(doc.isOk()) << doc.status().message() << "\n" << text;
  const json::Value *events = doc->find("traceEvents");
  ASSERT_NE(events, nullptr);
  std::vector<const json::Value *> complete;
  for (const json::Value &e : events->array) {
    if (e.find("ph")->string == "M" && e.find("name")->string == "process_name")
      EXPECT_EQ(e.find("args")->find("name")->string, "kiln train: step 7");
    if (e.find("ph")->string == "X")
      complete.push_back(&e);
  }
  ASSERT_EQ(complete.size(), 3u);
  // Microseconds: the last step's start and time of each thunk.
  EXPECT_EQ(complete[0]->find("ts")->number, 0);
  EXPECT_EQ(complete[0]->find("dur")->number, 1500);
  EXPECT_EQ(complete[1]->find("ts")->number, 1500);
  EXPECT_EQ(complete[1]->find("dur")->number, 250);
  EXPECT_EQ(complete[1]->find("name")->string,
            "kernel 'fusion\"0', kiln_kernel\\x");
  EXPECT_EQ(complete[1]->find("cat")->string, "kernel");
  EXPECT_EQ(complete[0]->find("tid")->integer, 0);
  EXPECT_EQ(complete[2]->find("tid")->integer, 1); // a collective
  EXPECT_EQ(complete[2]->find("args")->find("calls")->integer, 4);
  auto times = readThunkProfile(text);
  ASSERT_TRUE(times.isOk()) << times.status().message();
  EXPECT_EQ(times.value(), (std::vector<std::pair<size_t, double>>{
                               {0, 1.5}, {1, 0.5}, {2, 0.25}}));
  EXPECT_TRUE(isThunkTracePath("p.json"));
  EXPECT_FALSE(isThunkTracePath("p.csv"));
  EXPECT_FALSE(isThunkTracePath("json"));
}

// kiln train's trace: the host's spans on a row of their own, the thunks
// shifted to where the runtime began the step inside the step's span; the
// reader skips the host's spans.
TEST(ThunkProfile, TraceHoldsTheHostsSpans) {
  std::vector<HostSpan> host = {{"batch", 0, 0.5}, {"step 7", 0.5, 3.0}};
  std::string text =
      thunkProfileTrace(sample(), "kiln train: step 7", host, 0.75);
  StatusOr<json::Value> doc = json::parse(text);
  ASSERT_TRUE(doc.isOk()) << doc.status().message() << "\n" << text;
  std::vector<const json::Value *> complete;
  bool named = false;
  for (const json::Value &e : doc->find("traceEvents")->array) {
    if (e.find("ph")->string == "M" && e.find("tid")->integer == 2)
      named = e.find("args")->find("name")->string == "host";
    if (e.find("ph")->string == "X")
      complete.push_back(&e);
  }
  EXPECT_TRUE(named);
  ASSERT_EQ(complete.size(), 5u);
  EXPECT_EQ(complete[0]->find("name")->string, "batch");
  EXPECT_EQ(complete[0]->find("cat")->string, "host");
  EXPECT_EQ(complete[0]->find("tid")->integer, 2);
  EXPECT_EQ(complete[0]->find("dur")->number, 500);
  EXPECT_EQ(complete[1]->find("name")->string, "step 7");
  EXPECT_EQ(complete[1]->find("ts")->number, 500);
  EXPECT_EQ(complete[1]->find("dur")->number, 3000);
  // The thunks 0.75 ms in: 750, 2250 and 1250 us.
  EXPECT_EQ(complete[2]->find("ts")->number, 750);
  EXPECT_EQ(complete[3]->find("ts")->number, 2250);
  EXPECT_EQ(complete[4]->find("ts")->number, 1250);
  auto times = readThunkProfile(text);
  ASSERT_TRUE(times.isOk()) << times.status().message();
  EXPECT_EQ(times.value(), (std::vector<std::pair<size_t, double>>{
                               {0, 1.5}, {1, 0.5}, {2, 0.25}}));
  // With no thunks the trace is still JSON.
  EXPECT_TRUE(json::parse(thunkProfileTrace({}, "t", host)).isOk());
  EXPECT_TRUE(json::parse(thunkProfileTrace({}, "t")).isOk());
}

TEST(ThunkProfile, BadProfilesSayWhereAndWhatWasExpected) {
  auto message = [](const std::string &text) {
    auto r = readThunkProfile(text);
    return r.isOk() ? std::string("(read)") : r.status().message();
  };
  EXPECT_EQ(message("thunk,ms\n0,fast\n"),
            "line 2 ('0,fast'): expected THUNK,MILLISECONDS");
  EXPECT_EQ(message("thunk,ms\n-1,2\n"),
            "line 2 ('-1,2'): expected THUNK,MILLISECONDS");
  EXPECT_EQ(message("thunk,ms\n3\n"),
            "line 2 ('3'): expected THUNK,MILLISECONDS");
  EXPECT_EQ(message("thunk,ms\n3,-1\n"),
            "line 2 ('3,-1'): expected THUNK,MILLISECONDS");
  EXPECT_EQ(message("{\"traceEvents\": [{\"ph\": \"X\", \"args\": {}}]}"),
            "trace event 0: expected args.thunk and args.mean_ms (kiln train "
            "--profile=FILE.json)");
  EXPECT_EQ(message("{\"events\": []}"), "a trace without traceEvents");
  EXPECT_NE(message("{\"traceEvents\": [").find("not a trace: "),
            std::string::npos);
}

} // namespace
} // namespace kiln::runtime
