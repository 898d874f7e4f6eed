// Everything in qk::nn: modules, layers, init, checkpoints, clipping.
#pragma once

#include "qk/nn/activation.h"
#include "qk/nn/batchnorm.h"
#include "qk/nn/clip_grad.h"
#include "qk/nn/container.h"
#include "qk/nn/conv.h"
#include "qk/nn/embedding.h"
#include "qk/nn/fused.h"
#include "qk/nn/init.h"
#include "qk/nn/linear.h"
#include "qk/nn/module.h"
#include "qk/nn/normalization.h"
#include "qk/nn/pooling.h"
#include "qk/nn/safetensors.h"
#include "qk/nn/serialize.h"
