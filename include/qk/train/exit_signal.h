// Megatron's --exit-signal-handler: a signal (SIGTERM by default, as a
// cluster scheduler sends before killing a job) asks the trainer to finish
// the iteration it is in, save a checkpoint and exit cleanly.
//
//   qk::train::ExitSignal sig(SIGTERM);         // installs the handler
//   while (...) { train_one_iteration();
//                 if (sig.received_any(dp)) { save(); break; } }
//   // the previous handler is back when `sig` goes away
//
// The handler only sets a sig_atomic_t flag (async-signal-safe); the
// trainer reads it between iterations. received_any() agrees across
// data-parallel ranks (a max all-reduce), so all of them stop together.
#pragma once

#include <csignal>

#include "qk/train/step_runner.h"

namespace qk::train {

class ExitSignal {
 public:
  explicit ExitSignal(int signum = SIGTERM);
  ~ExitSignal();
  ExitSignal(const ExitSignal&) = delete;
  ExitSignal& operator=(const ExitSignal&) = delete;

  int signum() const { return signum_; }
  // This process got the signal since the handler was installed.
  bool received() const;
  // Some rank got it. Collective when dp.size() > 1.
  bool received_any(const DataParallel& dp) const;

 private:
  int signum_;
  struct sigaction previous_ {};
};

}  // namespace qk::train
