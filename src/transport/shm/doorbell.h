// The doorbell protocol: how a rank wakes another rank's progress thread, and only when it
// must. The owner's progress thread, before sleeping on its `doorbell` futex, sets `sleeping`
// and then looks at its rings once more; a producer, after publishing a record, looks at
// `sleeping` and `pollers`. With a full fence on both sides between the store and the loads,
// either the sleeper sees the record or the producer sees the sleeper (and rings). While a
// thread of the owner polls inline (`pollers` > 0), nobody rings: the poller drains, and its
// end_polling() hands over whatever is left.
#pragma once

#include <atomic>

#include "core/futex.h"
#include "transport/shm/layout.h"

namespace plait::transport::shm {

// Wakes the owner of `h` if it sleeps and nobody polls for it; `force`: regardless.
inline void ring_doorbell(SegmentHeader& h, bool force = false) {
  if (!force) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (h.sleeping.load(std::memory_order_relaxed) == 0 ||
        h.pollers.load(std::memory_order_relaxed) != 0)
      return;
  }
  h.doorbell.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_shared(&h.doorbell);
}

}  // namespace plait::transport::shm
