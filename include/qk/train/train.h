// The training-loop library in one include (see each header for its API).
// The optimizers it drives are qk/optim/optim.h's; what it trains, recipes'.
#pragma once

#include "qk/train/async_checkpoint.h"
#include "qk/train/checkpoint.h"
#include "qk/train/exit_signal.h"
#include "qk/train/gemm_peak.h"
#include "qk/train/metrics_log.h"
#include "qk/train/step_runner.h"
#include "qk/train/traffic_meter.h"
#include "qk/train/trainer.h"
