// Megatron's split of the transformer layers over pipeline ranks and
// virtual stages (arguments.py, TransformerConfig.__post_init__,
// get_num_layers_to_build, get_transformer_layer_offset).
#include "qk/parallel/pipeline_layout.h"

#include <numeric>
#include <sstream>

#include "qk/base/error.h"

namespace qk::parallel {

namespace {

// Model chunks per rank from the two virtual-stage flags (1: none).
int virtual_size_of(const PipelineSplitOptions& o) {
  const int64_t per_layers = o.num_layers_per_virtual_pipeline_stage;
  const int64_t per_rank = o.num_virtual_stages_per_pipeline_rank;
  QK_CHECK(per_layers >= 0 && per_rank >= 0, "--num-layers-per-virtual-pipeline-stage (", per_layers,
           ") and --num-virtual-stages-per-pipeline-rank (", per_rank, ") must be positive when given");
  QK_CHECK(per_layers == 0 || per_rank == 0,
           "give only one of --num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank");
  if (per_rank > 0) return static_cast<int>(per_rank);
  if (per_layers == 0) return 1;
  QK_CHECK(!o.decoder_first_pipeline_num_layers && !o.decoder_last_pipeline_num_layers,
           "uneven pipeline stages (--decoder-first/last-pipeline-num-layers) need "
           "--num-virtual-stages-per-pipeline-rank, not --num-layers-per-virtual-pipeline-stage");
  const int64_t p = o.pipeline_model_parallel_size;
  QK_CHECK(o.num_layers % p == 0, "--num-layers (", o.num_layers, ") must be divisible by --pipeline-model-parallel-size (",
           p, ")");
  const int64_t per_stage = o.num_layers / p;
  QK_CHECK(per_stage % per_layers == 0, "layers per pipeline stage (", per_stage, " = --num-layers ", o.num_layers,
           " / --pipeline-model-parallel-size ", p, ") must be divisible by --num-layers-per-virtual-pipeline-stage (",
           per_layers, ")");
  return static_cast<int>(per_stage / per_layers);
}

void check_divides_chunks(int64_t layers, int v, const char* what) {
  QK_CHECK(layers % v == 0, "the ", what, " (", layers, " layers) must be divisible by the virtual stages per rank (",
           v, ", from --num-layers-per-virtual-pipeline-stage or --num-virtual-stages-per-pipeline-rank)");
}

}  // namespace

PipelineLayerSplit PipelineLayerSplit::make(const PipelineSplitOptions& o) {
  QK_CHECK(o.num_layers > 0, "--num-layers must be > 0, got ", o.num_layers);
  QK_CHECK(o.pipeline_model_parallel_size >= 1, "--pipeline-model-parallel-size must be >= 1, got ",
           o.pipeline_model_parallel_size);
  PipelineLayerSplit s;
  s.num_layers_ = o.num_layers;
  s.pipeline_size_ = static_cast<int>(o.pipeline_model_parallel_size);
  s.virtual_size_ = virtual_size_of(o);
  const int p = s.pipeline_size_, v = s.virtual_size_;
  QK_CHECK(v == 1 || p > 1, "the interleaved schedule (", v,
           " virtual stages per rank, --num-layers-per-virtual-pipeline-stage / --num-virtual-stages-per-pipeline-rank) "
           "needs --pipeline-model-parallel-size > 1");

  const bool uneven = o.decoder_first_pipeline_num_layers || o.decoder_last_pipeline_num_layers;
  if (o.account_for_embedding || o.account_for_loss) {
    QK_CHECK(!uneven, "--account-for-embedding/loss-in-pipeline-split do not go with "
             "--decoder-first/last-pipeline-num-layers");
    const int64_t slots = o.num_layers + (o.account_for_embedding ? 1 : 0) + (o.account_for_loss ? 1 : 0);
    QK_CHECK(slots % p == 0, "--num-layers (", o.num_layers, ") plus the embedding and loss slots (",
             slots - o.num_layers, ") must be divisible by --pipeline-model-parallel-size (", p, ")");
    check_divides_chunks(slots / p, v, "slots per pipeline stage (layers, embedding, loss)");
    QK_CHECK(slots / p / v >= 1, "no layer slot per model chunk");
    s.set_chunks(std::vector<int64_t>(static_cast<size_t>(p), slots / p), o.account_for_embedding ? 1 : 0,
                 o.account_for_loss ? 1 : 0);
    return s;
  }
  if (!uneven) {
    QK_CHECK(o.num_layers % p == 0, "--num-layers (", o.num_layers,
             ") must be divisible by --pipeline-model-parallel-size (", p,
             "); or set --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers for uneven stages");
    check_divides_chunks(o.num_layers / p, v, "layers per pipeline stage");
    s.set_chunks(std::vector<int64_t>(static_cast<size_t>(p), o.num_layers / p), 0, 0);
    return s;
  }

  QK_CHECK(p > 1, "--decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size > 1");
  int64_t rest = o.num_layers;
  int middle = p;
  for (const auto& [flag, value] : {std::pair{"--decoder-first-pipeline-num-layers", o.decoder_first_pipeline_num_layers},
                                    std::pair{"--decoder-last-pipeline-num-layers", o.decoder_last_pipeline_num_layers}}) {
    if (!value) continue;
    QK_CHECK(*value > 0, flag, " must be > 0, got ", *value);
    if (v > 1) check_divides_chunks(*value, v, flag);
    rest -= *value;
    --middle;
  }
  QK_CHECK(rest >= 0, "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers hold more than "
           "--num-layers (", o.num_layers, ")");
  int64_t per_middle = 0;
  if (middle == 0) {
    QK_CHECK(rest == 0, "with --pipeline-model-parallel-size 2 the first and last stage hold every layer: "
             "--decoder-first-pipeline-num-layers + --decoder-last-pipeline-num-layers must equal --num-layers (",
             o.num_layers, "), ", rest, " left over");
  } else {
    QK_CHECK(rest % middle == 0 && rest / middle > 0, "the layers left for the ", middle,
             " other pipeline stages (", rest,
             " = --num-layers minus --decoder-first/last-pipeline-num-layers) must split evenly, at least one each");
    per_middle = rest / middle;
    if (v > 1) check_divides_chunks(per_middle, v, "layers of each middle pipeline stage");
  }
  std::vector<int64_t> rank_layers(static_cast<size_t>(p), per_middle);
  if (o.decoder_first_pipeline_num_layers) rank_layers.front() = *o.decoder_first_pipeline_num_layers;
  if (o.decoder_last_pipeline_num_layers) rank_layers.back() = *o.decoder_last_pipeline_num_layers;
  s.set_chunks(rank_layers, 0, 0);
  return s;
}

// Rank r's n_r layers cut into v equal chunks; the first chunk of the first
// rank and the last of the last give up less_first / less_last slots. A
// chunk starts after every chunk before it in the model's order (vp-major),
// Megatron's get_transformer_layer_offset.
void PipelineLayerSplit::set_chunks(const std::vector<int64_t>& rank_layers, int64_t less_first, int64_t less_last) {
  const int p = pipeline_size_, v = virtual_size_;
  chunk_layers_.assign(static_cast<size_t>(p) * static_cast<size_t>(v), 0);
  auto at = [&](int r, int vp) -> int64_t& { return chunk_layers_[static_cast<size_t>(vp * p + r)]; };
  for (int r = 0; r < p; ++r)
    for (int vp = 0; vp < v; ++vp) at(r, vp) = rank_layers[static_cast<size_t>(r)] / v;
  at(0, 0) -= less_first;
  at(p - 1, v - 1) -= less_last;
  chunk_offset_.assign(chunk_layers_.size(), 0);
  int64_t sum = 0;
  for (size_t i = 0; i < chunk_layers_.size(); ++i) {
    chunk_offset_[i] = sum;
    sum += chunk_layers_[i];
  }
  QK_CHECK_AS(InternalError, sum == num_layers_, "PipelineLayerSplit: the chunks hold ", sum, " layers, not ",
              num_layers_);
}

int64_t PipelineLayerSplit::num_layers(int pp_rank, int vp_stage) const {
  QK_CHECK_INDEX(pp_rank >= 0 && pp_rank < pipeline_size_ && vp_stage >= 0 && vp_stage < virtual_size_,
                 "PipelineLayerSplit: no stage (pp ", pp_rank, ", vp ", vp_stage, ") in ", pipeline_size_, " x ",
                 virtual_size_);
  return chunk_layers_[static_cast<size_t>(vp_stage * pipeline_size_ + pp_rank)];
}

int64_t PipelineLayerSplit::layer_offset(int pp_rank, int vp_stage) const {
  num_layers(pp_rank, vp_stage);  // range check
  return chunk_offset_[static_cast<size_t>(vp_stage * pipeline_size_ + pp_rank)];
}

int64_t PipelineLayerSplit::num_layers_on_rank(int pp_rank) const {
  int64_t n = 0;
  for (int vp = 0; vp < virtual_size_; ++vp) n += num_layers(pp_rank, vp);
  return n;
}

std::pair<int, int> PipelineLayerSplit::owner(int64_t layer) const {
  QK_CHECK_INDEX(layer >= 0 && layer < num_layers_, "PipelineLayerSplit: layer ", layer, " is outside [0, ",
                 num_layers_, ")");
  for (int vp = 0; vp < virtual_size_; ++vp)
    for (int r = 0; r < pipeline_size_; ++r) {
      const int64_t first = layer_offset(r, vp);
      if (layer >= first && layer < first + num_layers(r, vp)) return {r, vp};
    }
  QK_CHECK_AS(InternalError, false, "PipelineLayerSplit: layer ", layer, " has no owner");
  return {0, 0};
}

std::string PipelineLayerSplit::format() const {
  std::ostringstream os;
  for (int r = 0; r < pipeline_size_; ++r) {
    os << (r ? "; " : "") << "pp " << r << ":";
    for (int vp = 0; vp < virtual_size_; ++vp) {
      const int64_t first = layer_offset(r, vp), n = num_layers(r, vp);
      if (n == 0) {
        os << " []";
        continue;
      }
      os << " [" << first;
      if (n > 1) os << "-" << first + n - 1;
      os << "]";
    }
  }
  return os.str();
}

}  // namespace qk::parallel
