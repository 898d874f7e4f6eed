// The transformer layer in one include: config, functional seams, layers,
// the GPT model, its pipeline-stage chunks, its KV cache and multi-latent attention.
//
//   #include "qk/transformer/transformer.h"
//   qk::transformer::TransformerConfig c;  c.num_layers = 2;  ...
//   qk::transformer::GPTModel model(c);
#pragma once

#include "qk/transformer/config.h"
#include "qk/transformer/functional.h"
#include "qk/transformer/gpt_model.h"
#include "qk/transformer/gpt_pipeline.h"
#include "qk/transformer/kv_cache.h"
#include "qk/transformer/layers.h"
#include "qk/transformer/mla.h"
