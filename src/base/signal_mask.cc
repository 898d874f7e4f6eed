#include "qk/base/signal_mask.h"

#include <pthread.h>

#include <initializer_list>

namespace qk {

namespace {

// Every signal except those the thread raises itself by faulting (which must
// stay deliverable, or the fault would loop) and abort's.
sigset_t async_signals() {
  sigset_t s;
  sigfillset(&s);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT}) sigdelset(&s, sig);
  return s;
}

}  // namespace

AsyncSignalsBlocked::AsyncSignalsBlocked() {
  static const sigset_t kAsync = async_signals();
  pthread_sigmask(SIG_BLOCK, &kAsync, &previous_);
}

AsyncSignalsBlocked::~AsyncSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

}  // namespace qk
