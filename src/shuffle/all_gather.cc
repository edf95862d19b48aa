#include "shuffle/all_gather.h"

#include <chrono>
#include <cstring>
#include <string>

#include "plait/error.h"

namespace plait::shuffle {

namespace {

// Posts one message per peer in both directions and waits for all of them. ins[p] must hold
// the capacity of peer p's message.
void exchange_round(rdma::Fabric& fabric, rdma::CompletionQueue& cq, uint64_t tag,
                    std::vector<std::vector<uint8_t>>& ins, const std::vector<uint8_t>& out,
                    std::chrono::steady_clock::time_point deadline, const char* what) {
  const int n = fabric.size(), me = fabric.rank();
  int left = 0;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    fabric.recv(p, ins[p].data(), ins[p].size(), tag, cq, static_cast<uint64_t>(p) << 1);
    fabric.send(p, out.data(), out.size(), tag, 0, cq, static_cast<uint64_t>(p) << 1 | 1);
    left += 2;
  }
  std::vector<uint8_t> got(n, 0);
  while (left > 0) {
    rdma::Completion c;
    const auto wait = deadline - std::chrono::steady_clock::now();
    if (wait <= wait.zero() ||
        !cq.wait(&c, std::chrono::duration_cast<std::chrono::microseconds>(wait))) {
      int missing = -1;
      for (int p = 0; p < n && missing < 0; ++p)
        if (p != me && !got[p]) missing = p;
      throw timeout_error(std::string("waited ") + std::to_string(fabric.timeout().count()) +
                              " ms for " + what + (missing >= 0 ? " from rank " + std::to_string(missing) : ""),
                          {.rank = me, .peer = missing, .op = "shuffle all_gather"});
    }
    const int peer = static_cast<int>(c.context >> 1);
    if (!c.ok())
      throw Error(c.error->category(), std::string(what) + ": " + c.error->message(),
                  {.rank = me, .peer = peer, .op = "shuffle all_gather"});
    if ((c.context & 1) == 0) got[peer] = 1;
    --left;
  }
}

}  // namespace

std::vector<std::vector<uint8_t>> all_gather(rdma::Fabric& fabric, const std::vector<uint8_t>& mine,
                                             uint64_t tag) {
  const int n = fabric.size(), me = fabric.rank();
  auto cq = fabric.create_cq();
  const auto deadline = std::chrono::steady_clock::now() + fabric.timeout();
  // First the sizes, then the bytes: each receive then has exactly its message's capacity.
  std::vector<std::vector<uint8_t>> sizes(n, std::vector<uint8_t>(sizeof(uint64_t)));
  const uint64_t my_size = mine.size();
  std::vector<uint8_t> size_msg(sizeof(uint64_t));
  std::memcpy(size_msg.data(), &my_size, sizeof(uint64_t));
  std::vector<std::vector<uint8_t>> all(n);
  try {
    exchange_round(fabric, *cq, tag, sizes, size_msg, deadline, "the size of its message");
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      uint64_t len;
      std::memcpy(&len, sizes[p].data(), sizeof(uint64_t));
      all[p].resize(len);
    }
    exchange_round(fabric, *cq, tag, all, mine, deadline, "its message");
  } catch (...) {
    // Messages still posted into the buffers the unwind frees: nothing more lands in them.
    fabric.cancel(*cq);
    throw;
  }
  all[me] = mine;
  return all;
}

}  // namespace plait::shuffle
