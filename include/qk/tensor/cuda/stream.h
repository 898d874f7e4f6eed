// CUDA streams and events (torch.cuda.Stream / Event). Only in builds with
// the CUDA backend (QK_HAVE_CUDA_BACKEND; link qianka::tensor_cuda).
//
// Every kernel, copy and allocation of the CUDA backend goes to the current
// stream of its device (per thread; the legacy default stream until set).
// Memory freed on one stream is reused only by allocations on that stream.
//
//   qk::cuda::Stream side = qk::cuda::Stream::create();
//   {
//     qk::cuda::StreamGuard g(side);   // work below queues on `side`
//     y = qk::ops::mm(a, b);
//   }
//   qk::cuda::Event done;
//   done.record(side);
//   qk::cuda::current_stream().wait(done);  // later work waits for it
#pragma once

#include <cstdint>
#include <memory>

namespace qk {
class Tensor;
}  // namespace qk

namespace qk::cuda {

class Event;

class Stream {
 public:
  // The legacy default stream of `device`.
  explicit Stream(int device = 0) : device_(device) {}
  // A new stream (non-blocking with respect to the legacy default stream when
  // `non_blocking`); destroyed when its last copy goes.
  static Stream create(int device = 0, bool non_blocking = false);

  int device() const { return device_; }
  uintptr_t handle() const;  // the cudaStream_t
  uint64_t id() const;       // unique in the process, never reused (0: the default stream)
  void synchronize() const;  // waits for all work queued on it
  bool query() const;        // whether all of it is done
  void wait(const Event& e) const;  // later work on this stream waits for e
  bool operator==(const Stream& o) const { return handle() == o.handle() && device_ == o.device_; }

 private:
  struct Owned;
  int device_ = 0;
  std::shared_ptr<Owned> owned_;  // null: the legacy default stream
};

// The calling thread's current stream of `device`.
Stream current_stream(int device = 0);
void set_current_stream(const Stream& s);

// Work queued on `s` uses t's memory (torch's Tensor.record_stream): when
// t's storage is freed, its block is handed out again only after the work
// `s` has queued by then is done. For a tensor made on one stream and read
// on another (a side stream's copy, a communication stream).
void record_stream(const Tensor& t, const Stream& s);

// Makes `s` current for its device during a scope, then restores the previous one.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s) : prev_(current_stream(s.device())) { set_current_stream(s); }
  ~StreamGuard() { set_current_stream(prev_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

class Event {
 public:
  explicit Event(bool timing = true);
  void record(const Stream& s);
  void synchronize() const;
  bool query() const;
  // Milliseconds from this event to `end` (both recorded, with timing).
  float elapsed_ms(const Event& end) const;
  uintptr_t handle() const;

 private:
  struct Owned;
  std::shared_ptr<Owned> owned_;
};

}  // namespace qk::cuda
