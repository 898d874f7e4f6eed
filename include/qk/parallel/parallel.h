// The parallel layer: Megatron's rank grid and tensor parallelism.
#pragma once

#include "qk/parallel/cross_entropy.h"
#include "qk/parallel/layers.h"
#include "qk/parallel/mappings.h"
#include "qk/parallel/parallel_state.h"
#include "qk/parallel/rank_layout.h"
#include "qk/parallel/sharding.h"
