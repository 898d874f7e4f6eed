// Everything in qk::optim: optimizers and learning-rate schedules.
#pragma once

#include "qk/optim/adam.h"
#include "qk/optim/lr_scheduler.h"
#include "qk/optim/optimizer.h"
#include "qk/optim/sgd.h"
