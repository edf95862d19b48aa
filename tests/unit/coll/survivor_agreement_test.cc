// The survivors' agreement behind Communicator::shrink(): under randomized arrival times and
// partial knowledge of who died, every survivor gets the same member list; a rank that
// never joins is left out at the deadline and told so if it comes later; a decision that
// never appears ends in a timeout, not a hang.
#include "coll/survivor_agreement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <random>
#include <thread>

namespace plait::coll {
namespace {

using std::chrono::milliseconds;

struct Outcome {
  std::optional<SurvivorAgreement> agreed;
  std::optional<Error> error;
};

SurvivorAgreementArgs args_for(Store& store, int rank, int size, std::function<bool(int)> failed,
                               std::atomic<int64_t>& ids, milliseconds timeout) {
  return {.store = &store,
          .scope = "shrink/1/0",
          .rank = rank,
          .size = size,
          .peer_failed = std::move(failed),
          .draw_comm_id = [&ids] { return ids.fetch_add(1) + 2; },
          .timeout = timeout,
          .poll = std::chrono::microseconds(200)};
}

Outcome run(const SurvivorAgreementArgs& args) {
  Outcome out;
  try {
    out.agreed = agree_on_survivors(args);
  } catch (const Error& e) {
    out.error = e;
  }
  return out;
}

TEST(SurvivorAgreement, EverySurvivorGetsTheSameListUnderRandomArrivals) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 25; ++trial) {
    const int n = 3 + static_cast<int>(rng() % 6);
    std::vector<bool> dead(n, false);
    const int deaths = 1 + static_cast<int>(rng() % std::min(2, n - 2));
    for (int d = 0; d < deaths;) {
      int r = static_cast<int>(rng() % n);
      if (!dead[r]) dead[r] = true, ++d;
    }
    // Each survivor sees a death only if it was the dead rank's neighbour in some ring, and
    // only after a while; one survivor at least sees each death.
    std::vector<std::vector<int>> sees_after_ms(n, std::vector<int>(n, -1));
    for (int d = 0; d < n; ++d) {
      if (!dead[d]) continue;
      bool someone = false;
      for (int s = 0; s < n; ++s) {
        if (dead[s] || rng() % 2) continue;
        sees_after_ms[s][d] = static_cast<int>(rng() % 40);
        someone = true;
      }
      for (int s = 0; !someone && s < n; ++s)
        if (!dead[s]) sees_after_ms[s][d] = static_cast<int>(rng() % 40), someone = true;
    }
    auto store = make_hash_store();
    std::atomic<int64_t> ids{0};
    std::vector<Outcome> outcomes(n);
    std::vector<std::thread> threads;
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < n; ++r) {
      if (dead[r]) continue;
      const int delay = static_cast<int>(rng() % 30);
      threads.emplace_back([&, r, delay] {
        std::this_thread::sleep_for(milliseconds(delay));
        auto failed = [&, r](int peer) {
          const int after = sees_after_ms[r][peer];
          return after >= 0 && std::chrono::steady_clock::now() - start >= milliseconds(after);
        };
        outcomes[r] = run(args_for(*store, r, n, failed, ids, milliseconds(10000)));
      });
    }
    for (auto& t : threads) t.join();
    std::vector<int> alive;
    for (int r = 0; r < n; ++r)
      if (!dead[r]) alive.push_back(r);
    int64_t id = -1;
    for (int r : alive) {
      ASSERT_FALSE(outcomes[r].error) << "trial " << trial << " rank " << r << ": "
                                      << outcomes[r].error->what();
      EXPECT_EQ(outcomes[r].agreed->members, alive) << "trial " << trial << " rank " << r;
      if (id < 0) id = outcomes[r].agreed->comm_id;
      EXPECT_EQ(outcomes[r].agreed->comm_id, id);
    }
    EXPECT_EQ(ids.load(), 1) << "exactly one survivor decides";
  }
}

TEST(SurvivorAgreement, ARankThatNeverJoinsIsLeftOutAtTheDeadlineAndToldIfItComesLater) {
  auto store = make_hash_store();
  std::atomic<int64_t> ids{0};
  auto nobody_failed = [](int) { return false; };
  std::vector<Outcome> outcomes(4);
  std::vector<std::thread> threads;
  for (int r : {0, 1, 3})
    threads.emplace_back([&, r] {
      outcomes[r] = run(args_for(*store, r, 4, nobody_failed, ids, milliseconds(300)));
    });
  for (auto& t : threads) t.join();
  for (int r : {0, 1, 3}) {
    ASSERT_TRUE(outcomes[r].agreed) << outcomes[r].error->what();
    EXPECT_EQ(outcomes[r].agreed->members, (std::vector<int>{0, 1, 3}));
  }
  Outcome late = run(args_for(*store, 2, 4, nobody_failed, ids, milliseconds(300)));
  ASSERT_TRUE(late.error);
  EXPECT_EQ(late.error->category(), ErrorCategory::kAborted);
  EXPECT_NE(std::string(late.error->what()).find("rank 2 was left out"), std::string::npos)
      << late.error->what();
  EXPECT_NE(std::string(late.error->what()).find("ranks [0, 1, 3]"), std::string::npos);
}

TEST(SurvivorAgreement, ARankReportedDeadByAPeerIsLeftOutEvenIfItJoined) {
  // Rank 2's connection to rank 0 failed (a partition, not a death): the group cannot use
  // it, so the decision leaves it out and rank 2 learns that.
  auto store = make_hash_store();
  std::atomic<int64_t> ids{0};
  std::vector<Outcome> outcomes(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto failed = [r](int peer) { return (r == 0 && peer == 2) || (r == 2 && peer == 0); };
      outcomes[r] = run(args_for(*store, r, 3, failed, ids, milliseconds(5000)));
    });
  for (auto& t : threads) t.join();
  // Ranks 0 and 2 each reported the other; whichever report the decider saw first rules.
  // Either way every rank that is in agrees, and the one that is out is told.
  std::vector<int> members;
  for (int r = 0; r < 3; ++r)
    if (outcomes[r].agreed) {
      if (members.empty()) members = outcomes[r].agreed->members;
      EXPECT_EQ(outcomes[r].agreed->members, members);
    } else {
      EXPECT_EQ(outcomes[r].error->category(), ErrorCategory::kAborted);
    }
  EXPECT_TRUE(std::find(members.begin(), members.end(), 1) != members.end());
  EXPECT_LE(members.size(), 2u);
}

TEST(SurvivorAgreement, ADeciderThatDiesBeforePublishingEndsInATimeout) {
  auto store = make_hash_store();
  std::atomic<int64_t> ids{0};
  store->add("shrink/1/0/claim", 1);  // claimed, never published
  Outcome out = run(args_for(*store, 0, 2, [](int) { return true; }, ids, milliseconds(200)));
  ASSERT_TRUE(out.error);
  EXPECT_EQ(out.error->category(), ErrorCategory::kTimeout);
  EXPECT_NE(std::string(out.error->what()).find("shrink"), std::string::npos)
      << out.error->what();
}

}  // namespace
}  // namespace plait::coll
