#include "qk/train/exit_signal.h"

#include "qk/base/error.h"
#include "qk/tensor/tensor.h"

namespace qk::train {

namespace {

constexpr int kMaxSignal = 65;
volatile std::sig_atomic_t g_received[kMaxSignal] = {};

extern "C" void on_exit_signal(int signum) {
  if (signum > 0 && signum < kMaxSignal) g_received[signum] = 1;
}

}  // namespace

ExitSignal::ExitSignal(int signum) : signum_(signum) {
  QK_CHECK_AS(ValueError, signum > 0 && signum < kMaxSignal && signum != SIGKILL && signum != SIGSTOP,
              "ExitSignal: cannot handle signal ", signum);
  g_received[signum] = 0;
  struct sigaction sa {};
  sa.sa_handler = on_exit_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // system calls in flight (reads, collectives) carry on
  QK_CHECK_AS(IoError, ::sigaction(signum, &sa, &previous_) == 0, "ExitSignal: cannot install a handler for signal ",
              signum);
}

ExitSignal::~ExitSignal() { ::sigaction(signum_, &previous_, nullptr); }

bool ExitSignal::received() const { return g_received[signum_] != 0; }

bool ExitSignal::received_any(const DataParallel& dp) const {
  if (dp.size() == 1) return received();
  Tensor flag = from_vector<int64_t>({received() ? 1 : 0}, {1});
  dp.group->all_reduce(flag, dist::ReduceOp::max);
  return flag.data_ptr<int64_t>()[0] != 0;
}

}  // namespace qk::train
