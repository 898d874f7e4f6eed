// Everything in qk::optim: torch-style optimizers and learning-rate
// schedules, and Megatron-core's optimizer side (loss scalers, the
// mixed-precision and distributed optimizers, their gradient buffers, the
// optimizer-parameter scheduler).
#pragma once

#include "qk/optim/adam.h"
#include "qk/optim/distributed_optimizer.h"
#include "qk/optim/grad_unscale.h"
#include "qk/optim/loss_scaler.h"
#include "qk/optim/lr_scheduler.h"
#include "qk/optim/mixed_precision_optimizer.h"
#include "qk/optim/optimizer.h"
#include "qk/optim/optimizer_param_scheduler.h"
#include "qk/optim/param_and_grad_buffer.h"
#include "qk/optim/sgd.h"
