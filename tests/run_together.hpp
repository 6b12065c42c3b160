// Calls made at once from several threads: run_together(n, f) runs f(0) ..
// f(n - 1), each in a thread of its own, all starting together (no call
// begins before every thread is up), and returns when all have finished.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ropekv_test {

inline void run_together(int n, const std::function<void(int)>& f) {
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      {
        std::unique_lock<std::mutex> lock(mu);
        if (++ready == n) cv.notify_all();
        cv.wait(lock, [&] { return ready == n; });
      }
      f(i);
    });
  for (std::thread& t : threads) t.join();
}

}  // namespace ropekv_test
