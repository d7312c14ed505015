// Internal: a condition-variable wait that a binding can interrupt (the loader's and the GPU
// feed's waits for a batch or for an abandoned epoch's work).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

namespace stoker::detail {

// cv.wait(lock, ready), waking about every `interval` to call `while_waiting` (when given) without
// the lock — where a binding looks for Ctrl-C. What it throws leaves the wait with the lock
// released and nothing changed.
template <typename Ready>
void polled_wait(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Ready ready,
                 const std::function<void()>& while_waiting, std::chrono::milliseconds interval) {
  if (!while_waiting) return cv.wait(lock, ready);
  while (!cv.wait_for(lock, std::max(interval, std::chrono::milliseconds(1)), ready)) {
    lock.unlock();
    while_waiting();
    lock.lock();
  }
}

}  // namespace stoker::detail
