//===- TcpStoreTest.cpp - the rendezvous store, server and clients --------===//
//
// A server on 127.0.0.1 at an ephemeral port and clients in this process:
// set/get/wait/add/check, waits answered when another client sets the key,
// timeouts that name the missing keys, and the ranks' liveness (arrived,
// left, dropped, progress) that failures are diagnosed with.
//
//===----------------------------------------------------------------------===//

#include "runtime/dist/TcpStore.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

namespace kiln::runtime::dist {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

struct Fixture {
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<TcpStore> client(milliseconds timeout = milliseconds(2000)) {
    auto c = TcpStore::connect("127.0.0.1", server->port(), timeout);
    EXPECT_TRUE(c.isOk()) << c.status().message();
    return c.isOk() ? std::move(c.value()) : nullptr;
  }
  explicit Fixture(int world) {
    auto s = TcpStoreServer::start("127.0.0.1", 0, world);
    EXPECT_TRUE(s.isOk()) << s.status().message();
    if (s.isOk())
      server = std::move(s.value());
  }
};

TEST(TcpStore, SetGetAddCheck) {
  Fixture f(2);
  ASSERT_TRUE(f.server);
  EXPECT_GT(f.server->port(), 0);
  auto a = f.client(), b = f.client();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->set("k", std::string("v\0w", 3)).isOk());
  auto v = b->get("k", milliseconds(100));
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_EQ(v.value(), std::string("v\0w", 3));
  EXPECT_EQ(a->add("n", 5).value(), 5);
  EXPECT_EQ(b->add("n", -2).value(), 3);
  EXPECT_EQ(a->get("n", milliseconds(100)).value(), "3");
  EXPECT_THAT(a->add("k", 1).status().message(),
              HasSubstr("the value at 'k' is not an integer"));
  EXPECT_TRUE(a->check({"k", "n"}).value());
  EXPECT_FALSE(a->check({"k", "absent"}).value());
  // A large value travels whole.
  std::string big(3 << 20, 'x');
  big[12345] = 'y';
  ASSERT_TRUE(a->set("big", big).isOk());
  EXPECT_EQ(b->get("big", milliseconds(1000)).value(), big);
}

TEST(TcpStore, GetAndWaitAreAnsweredWhenTheKeyArrives) {
  Fixture f(2);
  auto a = f.client(), b = f.client();
  ASSERT_TRUE(a && b);
  std::thread setter([&] {
    // Sets the keys only after the getter asked (it waits on "asked").
    auto c = f.client();
    ASSERT_TRUE(c->wait({"asked"}, milliseconds(5000)).isOk());
    ASSERT_TRUE(c->set("late", "1").isOk());
    ASSERT_TRUE(c->set("later", "2").isOk());
  });
  ASSERT_TRUE(b->set("asked", "").isOk());
  auto v = a->get("late", milliseconds(5000));
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_EQ(v.value(), "1");
  EXPECT_TRUE(a->wait({"late", "later"}, milliseconds(5000)).isOk());
  setter.join();
}

TEST(TcpStore, TimeoutsNameTheMissingKeys) {
  Fixture f(1);
  auto a = f.client();
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->set("here", "1").isOk());
  auto start = Clock::now();
  std::vector<std::string> missing;
  Status s = a->wait({"here", "gone1", "gone2"}, milliseconds(200), &missing);
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_THAT(s.message(),
              HasSubstr("keys 'gone1', 'gone2' were not set within 200 ms"));
  EXPECT_EQ(missing, (std::vector<std::string>{"gone1", "gone2"}));
  EXPECT_GE(seconds, 0.19);
  EXPECT_LT(seconds, 2);
  EXPECT_THAT(a->get("gone1", milliseconds(50)).status().message(),
              HasSubstr("key 'gone1' was not set within 50 ms"));
  // The connection is still usable after a timeout.
  EXPECT_EQ(a->get("here", milliseconds(50)).value(), "1");
}

TEST(TcpStore, RanksArriveLeaveAndDrop) {
  Fixture f(3);
  auto r0 = f.client(), r1 = f.client(), r2 = f.client();
  ASSERT_TRUE(r0 && r1 && r2);
  ASSERT_TRUE(r0->hello(0).isOk());
  ASSERT_TRUE(r1->hello(1).isOk());
  // Rank 2 has not said hello: the answer comes at once.
  auto states = r0->ranks(milliseconds(5000));
  ASSERT_TRUE(states.isOk()) << states.status().message();
  EXPECT_EQ(states.value()[1].kind, RankState::Kind::Alive);
  EXPECT_EQ(states.value()[2].kind, RankState::Kind::Absent);

  EXPECT_THAT(r2->hello(1).message(), HasSubstr("rank 1 is already connected"));
  EXPECT_THAT(r2->hello(3).message(),
              HasSubstr("rank 3 is not below the world size 3"));
  ASSERT_TRUE(r2->hello(2).isOk());
  r0->postProgress(4);
  r1->postProgress(4);
  r2->postProgress(3);
  // A request on the same connection answers after its progress is applied.
  ASSERT_TRUE(r1->check({}).isOk());
  ASSERT_TRUE(r2->check({}).isOk());
  // All connected: waits 0 ms and answers.
  states = r0->ranks(milliseconds(0));
  ASSERT_TRUE(states.isOk());
  EXPECT_EQ(states.value()[0].progress, 4u);
  EXPECT_EQ(states.value()[2].progress, 3u);

  // Everyone connected: the query waits for one to go; rank 1's
  // connection dropping (no goodbye) is that change.
  std::thread dropper([&] {
    // Drops once the query below is waiting (it has posted "waiting").
    auto c = f.client();
    ASSERT_TRUE(c->wait({"waiting"}, milliseconds(5000)).isOk());
    r1.reset();
  });
  ASSERT_TRUE(r2->set("waiting", "").isOk());
  states = r0->ranks(milliseconds(20000));
  dropper.join();
  ASSERT_TRUE(states.isOk());
  EXPECT_EQ(states.value()[1].kind, RankState::Kind::Dropped);
  EXPECT_STREQ(describe(RankState::Kind::Dropped),
               "exited (its connection to the store dropped)");

  ASSERT_TRUE(r2->leave().isOk());
  r2.reset();
  states = r0->ranks(milliseconds(5000));
  ASSERT_TRUE(states.isOk());
  EXPECT_EQ(states.value()[2].kind, RankState::Kind::Left);
  // A rank that left may come back (a new communicator in the same job).
  auto again = f.client();
  EXPECT_TRUE(again->hello(2).isOk());
  again.reset();
  r0.reset();
  EXPECT_TRUE(f.server->waitForRanksToLeave(milliseconds(5000)));
}

TEST(TcpStore, ConnectRetriesUntilTheServerListens) {
  // Pick a port, release it, start a client, then listen there.
  int port;
  {
    auto s = TcpStoreServer::start("127.0.0.1", 0, 1);
    ASSERT_TRUE(s.isOk());
    port = s.value()->port();
  }
  auto refused = TcpStore::connect("127.0.0.1", port, milliseconds(100));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("cannot reach the store at 127.0.0.1:" +
                        std::to_string(port)));
  std::unique_ptr<TcpStoreServer> server;
  std::thread late([&] {
    auto s = TcpStoreServer::start("127.0.0.1", port, 1);
    ASSERT_TRUE(s.isOk()) << s.status().message();
    server = std::move(s.value());
  });
  auto client = TcpStore::connect("127.0.0.1", port, milliseconds(10000));
  late.join();
  ASSERT_TRUE(client.isOk()) << client.status().message();
  EXPECT_TRUE(client.value()->set("a", "b").isOk());
}

TEST(TcpStore, LostServerIsAnError) {
  auto f = std::make_unique<Fixture>(1);
  auto a = f->client();
  ASSERT_TRUE(a);
  f.reset();
  Status s = a->set("a", "b");
  EXPECT_THAT(s.message(), HasSubstr("lost the connection to the store"));
}

TEST(TcpStore, ServerRefusesABusyPort) {
  Fixture f(1);
  auto second = TcpStoreServer::start("127.0.0.1", f.server->port(), 1);
  EXPECT_THAT(second.status().message(), HasSubstr("cannot listen"));
}

} // namespace
} // namespace kiln::runtime::dist
