#include "plait/sort/phase_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace plait::cli {
namespace {

constexpr auto kRedrawEvery = std::chrono::milliseconds(100);
constexpr int kBarWidth = 20;
constexpr size_t kLineWidth = 79;  // a redraw pads to it, so a shorter line hides a longer one

std::string gigabytes(uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof(s), "%.2f", static_cast<double>(bytes) / 1e9);
  return s;
}

}  // namespace

PhaseProgress::PhaseProgress(std::string command, bool enabled, std::FILE* out)
    : command_(std::move(command)), enabled_(enabled), out_(out) {
  if (enabled_) redrawer_ = std::thread([this] { redraw_until_stopped(); });
}

PhaseProgress::~PhaseProgress() {
  end();
  if (!redrawer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  redrawer_.join();
}

bool PhaseProgress::wanted() {
  const char* v = std::getenv("PLAIT_PROGRESS");
  if (v != nullptr && *v != '\0') return std::strcmp(v, "0") != 0;
  return isatty(STDERR_FILENO) == 1;
}

void PhaseProgress::begin(const std::string& phase, uint64_t total) {
  end();
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  phase_ = phase;
  total_ = total;
  done_.store(0, std::memory_order_relaxed);
  active_ = true;
  started_ = Clock::now();
  draw(false);
}

void PhaseProgress::end() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_) return;
  draw(true);
  active_ = false;
}

void PhaseProgress::redraw_until_stopped() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, kRedrawEvery);
    if (active_ && !stopping_) draw(false);
  }
}

void PhaseProgress::draw(bool final) {
  const uint64_t done = done_.load(std::memory_order_relaxed);
  const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  const double rate = seconds > 0 ? static_cast<double>(done) / 1e9 / seconds : 0;
  char head[64], tail[128];
  std::snprintf(head, sizeof(head), "%s %-8s ", command_.c_str(), phase_.c_str());
  std::string line = head;
  if (final) {
    std::snprintf(tail, sizeof(tail), "done in %.2f s", seconds);
    line += tail;
    if (done > 0) {
      std::snprintf(tail, sizeof(tail), " (%s GB, %.2f GB/s)", gigabytes(done).c_str(), rate);
      line += tail;
    }
  } else if (total_ > 0) {
    const double f = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
    const int filled = static_cast<int>(f * kBarWidth);
    line += '[' + std::string(filled, '#') + std::string(kBarWidth - filled, '.') + ']';
    std::snprintf(tail, sizeof(tail), " %3d %%  %s / %s GB  %.2f GB/s  %.1f s",
                  static_cast<int>(f * 100), gigabytes(done).c_str(), gigabytes(total_).c_str(),
                  rate, seconds);
    line += tail;
  } else {
    if (done > 0) {
      std::snprintf(tail, sizeof(tail), "%s GB  %.2f GB/s  ", gigabytes(done).c_str(), rate);
      line += tail;
    }
    std::snprintf(tail, sizeof(tail), "%.1f s", seconds);
    line += tail;
  }
  if (line.size() < kLineWidth) line.append(kLineWidth - line.size(), ' ');
  line += final ? '\n' : '\r';
  std::fputs(line.c_str(), out_);
  std::fflush(out_);
}

}  // namespace plait::cli
