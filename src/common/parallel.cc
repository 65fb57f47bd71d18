#include "common/parallel.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace mgs {
namespace {

// The most helpers one loop may ask for (MGS_THREADS is capped at 1024).
constexpr int kMaxHelpers = 1023;

thread_local bool tl_in_task = false;

struct Job {
  const std::function<void(int)>* fn = nullptr;
  int count = 0;
  std::atomic<int> next{0};
  int wanted = 0;  // helpers that may still join
  int active = 0;  // helpers inside run(); guarded by Pool::mu_
  std::exception_ptr error;  // guarded by Pool::mu_
  std::condition_variable done;
};

class Pool {
 public:
  // Never destroyed: helpers blocked in wait() at process exit are simply
  // ended with it, so no static destructor races a late loop or a thread
  // that is still joining (a job's end must never raise).
  static Pool& get() {
    static Pool* pool = new Pool;
    return *pool;
  }

  void run(int count, int threads, const std::function<void(int)>& fn) {
    Job job;
    job.fn = &fn;
    job.count = count;
    const int helpers = std::min({threads - 1, count - 1, kMaxHelpers});
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (; started_ < helpers; ++started_) std::thread([this] { workerLoop(); }).detach();
      job.wanted = helpers;
      queue_.push_back(&job);
    }
    if (helpers == 1)
      wake_.notify_one();
    else
      wake_.notify_all();
    std::exception_ptr mine = work(&job);
    std::unique_lock<std::mutex> lk(mu_);
    // Close the job: helpers that have not joined yet never will (they find
    // it gone from the queue), so only those already inside are waited for.
    queue_.erase(std::remove(queue_.begin(), queue_.end(), &job), queue_.end());
    job.done.wait(lk, [&] { return job.active == 0; });
    if (!mine) mine = job.error;
    lk.unlock();
    if (mine) std::rethrow_exception(mine);
  }

  int threads() {
    std::lock_guard<std::mutex> lk(mu_);
    return started_;
  }

 private:
  // Claims tasks until none are left; returns the first exception.
  static std::exception_ptr work(Job* job) {
    std::exception_ptr first;
    tl_in_task = true;
    for (int i; (i = job->next.fetch_add(1, std::memory_order_relaxed)) < job->count;) {
      try {
        (*job->fn)(i);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    tl_in_task = false;
    return first;
  }

  void workerLoop() {
    pthread_setname_np(pthread_self(), "mgs-pool");
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      wake_.wait(lk, [&] { return !queue_.empty(); });
      Job* job = queue_.front();
      ++job->active;
      if (--job->wanted <= 0) queue_.pop_front();
      lk.unlock();
      std::exception_ptr err = work(job);
      lk.lock();
      if (err && !job->error) job->error = err;
      if (--job->active == 0) job->done.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Job*> queue_;
  int started_ = 0;  // helpers, detached; they live as long as the process
};

}  // namespace

void parallelFor(int count, int threads, const std::function<void(int)>& fn) {
  if (count <= 0) return;
  if (threads <= 1 || count == 1 || tl_in_task) {
    for (int i = 0; i < count; ++i) fn(i);
    return;
  }
  Pool::get().run(count, threads, fn);
}

int parallelPoolThreads() { return Pool::get().threads(); }

}  // namespace mgs
