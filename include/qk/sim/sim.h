// qk::sim: `qk sim`'s library (docs/sim.md). Plan a training run before
// buying the time: a step simulated on a cluster, the layouts that fit
// ranked by throughput, goodput under failures.
#pragma once

#include "qk/sim/calibrate.h"
#include "qk/sim/cluster.h"
#include "qk/sim/reliability.h"
#include "qk/sim/simulate.h"
