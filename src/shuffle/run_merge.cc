#include "shuffle/run_merge.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace plait::shuffle {
namespace {

struct Cursor {
  const uint8_t* at;
  const uint8_t* end;
  uint64_t head;  // the key's first 8 bytes, big-endian: most comparisons end here
  size_t run;
};

uint64_t key_head(const uint8_t* record, size_t key_bytes) {
  uint64_t v = 0;
  if (key_bytes >= 8) {
    std::memcpy(&v, record, 8);
    return __builtin_bswap64(v);
  }
  uint8_t b[8] = {};
  std::memcpy(b, record, key_bytes);
  std::memcpy(&v, b, 8);
  return __builtin_bswap64(v);
}

class Merger {
 public:
  Merger(size_t record_bytes, size_t key_bytes, uint8_t* batch, size_t batch_records,
         const RecordSink& sink)
      : rb_(record_bytes), kb_(key_bytes), batch_(batch), cap_(batch_records), sink_(sink) {}

  bool less(const Cursor& x, const Cursor& y) const {
    if (x.head != y.head) return x.head < y.head;
    if (kb_ > 8) {
      const int c = std::memcmp(x.at + 8, y.at + 8, kb_ - 8);
      if (c != 0) return c < 0;
    }
    return x.run < y.run;
  }

  void emit(const uint8_t* records, size_t count) {
    while (count > 0) {
      const size_t n = std::min(count, cap_ - used_);
      std::memcpy(batch_ + used_ * rb_, records, n * rb_);
      used_ += n;
      records += n * rb_;
      count -= n;
      if (used_ == cap_) flush();
    }
  }
  void flush() {
    if (used_ > 0) sink_(batch_, used_);
    used_ = 0;
  }

  // Binary heap of cursors, the smallest at heap_[0].
  void sift_down(size_t i) {
    const size_t n = heap_.size();
    for (;;) {
      size_t m = i;
      const size_t l = 2 * i + 1, r = l + 1;
      if (l < n && less(heap_[l], heap_[m])) m = l;
      if (r < n && less(heap_[r], heap_[m])) m = r;
      if (m == i) return;
      std::swap(heap_[i], heap_[m]);
      i = m;
    }
  }

  void run(size_t runs, const NextWindow& next) {
    for (size_t r = 0; r < runs; ++r) {
      const auto w = next(r);
      if (!w.empty()) heap_.push_back({w.data(), w.data() + w.size(), key_head(w.data(), kb_), r});
    }
    for (size_t i = heap_.size() / 2; i-- > 0;) sift_down(i);
    while (heap_.size() > 1) {
      Cursor& top = heap_[0];
      emit(top.at, 1);
      top.at += rb_;
      if (top.at == top.end) {
        const auto w = next(top.run);
        if (w.empty()) {
          top = heap_.back();
          heap_.pop_back();
          sift_down(0);
          continue;
        }
        top.at = w.data();
        top.end = w.data() + w.size();
      }
      top.head = key_head(top.at, kb_);
      sift_down(0);
    }
    // The last run left: the rest of it as it comes.
    if (!heap_.empty()) {
      Cursor c = heap_[0];
      for (;;) {
        emit(c.at, static_cast<size_t>(c.end - c.at) / rb_);
        const auto w = next(c.run);
        if (w.empty()) break;
        c.at = w.data();
        c.end = w.data() + w.size();
      }
    }
    flush();
  }

 private:
  size_t rb_, kb_;
  uint8_t* batch_;
  size_t cap_;
  size_t used_ = 0;
  const RecordSink& sink_;
  std::vector<Cursor> heap_;
};

}  // namespace

void merge_runs(size_t runs, size_t record_bytes, size_t key_bytes, const NextWindow& next,
                uint8_t* batch, size_t batch_records, const RecordSink& sink) {
  Merger merger(record_bytes, key_bytes, batch, batch_records, sink);
  if (key_bytes == 0) {  // no order to keep but the runs'
    for (size_t r = 0; r < runs; ++r)
      for (auto w = next(r); !w.empty(); w = next(r)) merger.emit(w.data(), w.size() / record_bytes);
    merger.flush();
    return;
  }
  merger.run(runs, next);
}

}  // namespace plait::shuffle
