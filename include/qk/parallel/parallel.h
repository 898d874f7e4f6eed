// The parallel layer: Megatron's rank grid, tensor parallelism, and the
// pipeline's layer split, schedules and timeline.
#pragma once

#include "qk/parallel/cross_entropy.h"
#include "qk/parallel/layers.h"
#include "qk/parallel/mappings.h"
#include "qk/parallel/parallel_state.h"
#include "qk/parallel/pipeline_layout.h"
#include "qk/parallel/pipeline_schedule.h"
#include "qk/parallel/rank_layout.h"
#include "qk/parallel/sharding.h"
#include "qk/parallel/timeline.h"
