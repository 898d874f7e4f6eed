#include "qk/base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/pool_spin.h"

namespace qk {

namespace {

QK_ENV_INT(env_num_threads, "QK_NUM_THREADS", 0,
           "Intra-op CPU threads (0: one per available core).");

QK_ENV_INT(env_spin_us, "QK_POOL_SPIN_US", 0,
           "Microseconds idle pool threads (and a caller waiting for them) spin before sleeping; 0: sleep at "
           "once (code such as qk md turns spinning on for itself unless this is set; qk/base/pool_spin.h).");

std::atomic<int64_t>& spin_us_setting() {
  static std::atomic<int64_t> us{std::max<int64_t>(0, env_spin_us.get())};
  return us;
}

thread_local bool t_in_region = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or for up to QK_POOL_SPIN_US; returns done(). The clock is read every 64 turns.
template <typename Done>
bool spin_until(Done done) {
  const int64_t spin_us = spin_us_setting().load(std::memory_order_relaxed);
  if (spin_us == 0) return done();
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

int default_threads() {
  int64_t n = env_num_threads.get();
  if (n > 0) return static_cast<int>(n);
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

// One job at a time: chunks are claimed from an atomic counter by the caller
// and the workers; `remaining` counts chunks not yet finished. `busy` counts
// workers inside work(): a new job is set up only when it is zero, so a worker
// still leaving the last job cannot read the new job's chunk count against the
// old job's claim counter (a chunk run twice, `remaining` below zero, a hang).
class ForkJoinPool {
 public:
  explicit ForkJoinPool(int n) { resize(n); }
  ~ForkJoinPool() { stop(); }

  int size() const { return size_; }

  void resize(int n) {
    QK_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
    stop();
    size_ = n;
    stopping_ = false;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  void run(int64_t begin, int64_t end, int64_t grain, detail::RangeFn fn, void* ctx) {
    std::lock_guard<std::mutex> job_lock(job_mutex_);  // one job at a time
    int64_t n = end - begin;
    int64_t max_chunks = std::max<int64_t>(1, n / grain);
    int64_t chunks = std::min<int64_t>(max_chunks, size_);
    {
      std::unique_lock<std::mutex> lk(mu_);
      idle_cv_.wait(lk, [this] { return busy_ == 0; });
      fn_ = fn;
      ctx_ = ctx;
      begin_ = begin;
      end_ = end;
      chunks_ = chunks;
      next_.store(0);
      remaining_.store(chunks);
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work();
    spin_until([this] { return remaining_.load() == 0; });
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return remaining_.load() == 0; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    t_in_region = true;
    for (;;) {
      int64_t c = next_.fetch_add(1);
      if (c >= chunks_) break;
      int64_t n = end_ - begin_;
      int64_t lo = begin_ + n * c / chunks_;
      int64_t hi = begin_ + n * (c + 1) / chunks_;
      try {
        fn_(ctx_, lo, hi);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
      }
      if (remaining_.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lk(mu_);
        done_cv_.notify_all();
      }
    }
    t_in_region = false;
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      // The next job often comes within microseconds (a training step or an MD step is many short loops).
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        ++busy_;
      }
      work();
      std::lock_guard<std::mutex> lk(mu_);
      if (--busy_ == 0) idle_cv_.notify_all();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::mutex job_mutex_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_, idle_cv_;
  std::vector<std::thread> workers_;
  int size_ = 1;
  bool stopping_ = false;
  int busy_ = 0;
  std::atomic<uint64_t> generation_{0};  // written under mu_; read without it while spinning
  detail::RangeFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t begin_ = 0, end_ = 0, chunks_ = 0;
  std::atomic<int64_t> next_{0}, remaining_{0};
  std::exception_ptr error_;
};

ForkJoinPool& pool() {
  static ForkJoinPool p(default_threads());
  return p;
}

}  // namespace

int num_threads() { return pool().size(); }
int64_t pool_spin_us() { return spin_us_setting().load(); }
void set_pool_spin_us(int64_t us) { spin_us_setting().store(std::max<int64_t>(0, us)); }
ScopedPoolSpin::ScopedPoolSpin(int64_t us) : before_(pool_spin_us()) {
  if (!env::get_raw("QK_POOL_SPIN_US")) set_pool_spin_us(us);
}
ScopedPoolSpin::~ScopedPoolSpin() { set_pool_spin_us(before_); }
void set_num_threads(int n) { pool().resize(n); }
bool in_parallel_region() { return t_in_region; }

namespace detail {
void parallel_for_impl(int64_t begin, int64_t end, int64_t grain, RangeFn fn, void* ctx) {
  pool().run(begin, end, grain, fn, ctx);
}
}  // namespace detail

// ---------------------------------------------------------------------------
// TaskPool

struct TaskPool::Impl {
  std::mutex mu;
  std::condition_variable cv, idle_cv;
  std::deque<std::function<void()>> queue;
  std::vector<std::thread> threads;
  int running = 0;
  bool stopping = false;
};

TaskPool::TaskPool(int n) : impl_(std::make_unique<Impl>()) {
  QK_CHECK(n >= 1, "TaskPool: expected at least 1 thread, got ", n);
  for (int i = 0; i < n; ++i) {
    impl_->threads.emplace_back([this] {
      Impl& s = *impl_;
      for (;;) {
        std::function<void()> task;
        {
          std::unique_lock<std::mutex> lk(s.mu);
          s.cv.wait(lk, [&] { return s.stopping || !s.queue.empty(); });
          if (s.queue.empty()) return;
          task = std::move(s.queue.front());
          s.queue.pop_front();
          ++s.running;
        }
        task();  // tasks report their own errors (futures, promises)
        {
          std::lock_guard<std::mutex> lk(s.mu);
          --s.running;
          if (s.queue.empty() && s.running == 0) s.idle_cv.notify_all();
        }
      }
    });
  }
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  for (auto& t : impl_->threads) t.join();
}

void TaskPool::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->queue.push_back(std::move(task));
  }
  impl_->cv.notify_one();
}

void TaskPool::wait_idle() {
  std::unique_lock<std::mutex> lk(impl_->mu);
  impl_->idle_cv.wait(lk, [&] { return impl_->queue.empty() && impl_->running == 0; });
}

int TaskPool::size() const { return static_cast<int>(impl_->threads.size()); }

}  // namespace qk
