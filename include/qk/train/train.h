// The training-loop library in one include (see each header for its API).
#pragma once

#include "qk/train/checkpoint.h"
#include "qk/train/distributed_optimizer.h"
#include "qk/train/exit_signal.h"
#include "qk/train/gemm_peak.h"
#include "qk/train/gpt_pretrain.h"
#include "qk/train/loss_scaler.h"
#include "qk/train/lr_schedule.h"
#include "qk/train/metrics_log.h"
#include "qk/train/mixed_precision_optimizer.h"
#include "qk/train/param_and_grad_buffer.h"
#include "qk/train/plot.h"
#include "qk/train/step_runner.h"
#include "qk/train/trainer.h"
