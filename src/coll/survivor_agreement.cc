// The survivors' agreement behind Communicator::shrink(); see survivor_agreement.h.
#include "coll/survivor_agreement.h"

#include <algorithm>
#include <thread>

#include "core/clock.h"
#include "core/log.h"
#include "core/rank_list.h"

namespace plait::coll {
namespace {

// "id:r0,r1,...", as the deciding survivor publishes it.
// The decision in the store: "<communicator id>:<rank>,<rank>,...".
std::string encode_decision(int64_t comm_id, const std::vector<int>& members) {
  std::string text = std::to_string(comm_id) + ":";
  for (size_t i = 0; i < members.size(); ++i) text += (i ? "," : "") + std::to_string(members[i]);
  return text;
}

SurvivorAgreement parse_decision(const std::string& text, const ErrorContext& ctx) {
  SurvivorAgreement out;
  const size_t colon = text.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no ':'");
    out.comm_id = std::stoll(text.substr(0, colon));
    for (size_t at = colon + 1; at < text.size();) {
      size_t end = text.find(',', at);
      if (end == std::string::npos) end = text.size();
      out.members.push_back(std::stoi(text.substr(at, end - at)));
      at = end + 1;
    }
  } catch (const std::exception&) {
    throw invalid_usage("the store holds a malformed shrink decision '" + text +
                            "' (another job or communicator shares this store scope?)",
                        ctx);
  }
  return out;
}

}  // namespace

SurvivorAgreement agree_on_survivors(const SurvivorAgreementArgs& a) {
  const ErrorContext ctx{.rank = a.rank, .op = "shrink"};
  Store& store = *a.store;
  const int n = a.size;
  auto key = [&](const char* what, int r) {
    return a.scope + "/" + what + "/" + std::to_string(r);
  };
  const std::string decision_key = a.scope + "/decision";
  const Deadline deadline = Deadline::after(a.timeout);
  std::string decision;
  try {
    store.set(key("alive", a.rank), std::string("1"));
    std::vector<char> alive(n, 0), dead(n, 0), reported(n, 0);
    alive[a.rank] = 1;
    for (;;) {
      if (store.check(decision_key)) break;
      // What this rank's own transport knows; a death one survivor saw counts for all.
      for (int r = 0; r < n; ++r) {
        if (r == a.rank || reported[r] || !a.peer_failed(r)) continue;
        store.set(key("dead", r), "rank " + std::to_string(a.rank) + " saw it fail");
        reported[r] = dead[r] = 1;
      }
      bool accounted = true;
      for (int r = 0; r < n; ++r) {
        if (alive[r] || dead[r]) continue;
        if (store.check(key("dead", r))) dead[r] = 1;
        else if (store.check(key("alive", r))) alive[r] = 1;
        else accounted = false;
      }
      if (accounted || deadline.expired()) {
        if (store.add(a.scope + "/claim", 1) == 1) {
          // Decide on fresh reads: a rank registered in the meantime is in, one reported
          // dead in the meantime (its connection to a survivor failed) is out.
          std::vector<int> members;
          std::vector<int> missing;
          for (int r = 0; r < n; ++r) {
            const bool in = (alive[r] || store.check(key("alive", r))) &&
                            !store.check(key("dead", r));
            (in ? members : missing).push_back(r);
          }
          const int64_t id = a.draw_comm_id();
          log(LogLevel::kInfo, "shrink: rank ", a.rank, " decided the survivors: ranks [",
                         rank_list(members), "] of ", n, "; left out [", rank_list(missing), "]",
                         accounted ? "" : " (some never joined before the deadline)");
          store.set(decision_key, encode_decision(id, members));
        }
        break;
      }
      std::this_thread::sleep_for(a.poll);
    }
    // The decider publishes right after its claim; a little grace past our own deadline
    // lets a decision made at the last moment arrive.
    const auto wait = std::max(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining()),
        std::min<std::chrono::milliseconds>(a.timeout, std::chrono::seconds(5)));
    decision = store.get_string(decision_key, wait);
  } catch (const Error& e) {
    throw e.with_context(ctx);
  }
  SurvivorAgreement out = parse_decision(decision, ctx);
  if (!std::binary_search(out.members.begin(), out.members.end(), a.rank))
    throw aborted_error("rank " + std::to_string(a.rank) + " was left out: the survivors of " +
                            std::to_string(n) + " ranks agreed on ranks [" + rank_list(out.members) +
                            "] before it joined shrink, or a peer reported its connection failed",
                        ctx);
  return out;
}

}  // namespace plait::coll
