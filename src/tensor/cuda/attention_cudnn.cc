// cuDNN's fused flash attention through cudnn-frontend's graph API
// (attention_cudnn.h). Tensors are described as cuDNN's [b, h, s, d] over
// qk's [B, T, H, D] memory by strides, so nothing is transposed or copied;
// qk's lse [B, Hq, T] is cuDNN's softmax statistics (the natural log of the
// row's sum of exp(scale q.k)), so a forward by either path feeds a backward
// by either. The backward asks for cuDNN's deterministic algorithm: qk's
// steps are bit-reproducible (a replayed CUDA graph equals eager).
#include "attention_cudnn.h"

#include <cstring>
#include <exception>
#include <memory>
#include <unordered_map>

// The frontend's JSON serialisation (graph dumps) is not used; without it
// the frontend needs no JSON library.
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>

#include "cudnn_handle.h"
#include "graph.h"
#include "plan_cache.h"
#include "qk/base/error.h"
#include "qk/base/log.h"

namespace qk::cuda {

namespace {

namespace fe = cudnn_frontend;

// The graphs' tensors, by the uids the variant pack names them with.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// A graph cuDNN built for one shape, or why it did not.
struct AttentionGraph {
  std::shared_ptr<fe::graph::Graph> graph;  // null: refused
  int64_t workspace = 0;
  std::string refusal;
};

// The stride between query heads of a [B, T, Hq, D] view of q; 0 when
// grouped heads ([B, T, Hkv, G, D]) are not evenly spaced.
int64_t q_head_stride(const AttentionShape& a) {
  if (a.q_group <= 1) return a.q_sh;
  return a.q_sh == a.q_group * a.q_sg ? a.q_sg : 0;
}

// Why cuDNN is not asked at all (nullptr: ask it).
const char* outside_cudnn(const AttentionShape& a, DType t) {
  if (t != DType::bf16 && t != DType::f16) return "cuDNN's fused attention takes bf16 and f16 only";
  if (a.dropout_on) return "dropout follows qk's own Philox stream (the CPU's), which cuDNN does not draw";
  if (a.causal && a.T != a.S) return "a causal mask with T != S is bottom-right aligned in qk";
  if (q_head_stride(a) == 0) return "the grouped query heads are not evenly spaced";
  if (a.B * a.Hq * a.T * a.S == 0) return "an empty call";
  return nullptr;
}

fe::DataType_t io_type(DType t) { return t == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF; }

std::shared_ptr<fe::graph::Graph> new_graph(DType t) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io_type(t))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

using TensorRef = std::shared_ptr<fe::graph::Tensor_attributes>;

TensorRef input(fe::graph::Graph& g, const char* name, Uid uid, std::vector<int64_t> dim,
                std::vector<int64_t> stride) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dim)).set_stride(
      std::move(stride)));
}

// q, k and v as cuDNN's [b, h, s, d].
struct Qkv {
  TensorRef q, k, v;
};
Qkv qkv_inputs(fe::graph::Graph& g, const AttentionShape& a) {
  return {input(g, "Q", kQ, {a.B, a.Hq, a.T, a.D}, {a.q_sb, q_head_stride(a), a.q_st, 1}),
          input(g, "K", kK, {a.B, a.Hkv, a.S, a.D}, {a.k_sb, a.k_sh, a.k_ss, 1}),
          input(g, "V", kV, {a.B, a.Hkv, a.S, a.Dv}, {a.v_sb, a.v_sh, a.v_ss, 1})};
}

// The strides of a contiguous [B, T, H, D] as [b, h, s, d].
std::vector<int64_t> bthd_strides(int64_t T, int64_t H, int64_t D) { return {T * H * D, D, H * D, 1}; }
// lse [B, Hq, T] as cuDNN's statistics [b, h, s, 1].
void as_stats(fe::graph::Tensor_attributes& s, const AttentionShape& a) {
  s.set_data_type(fe::DataType_t::FLOAT).set_dim({a.B, a.Hq, a.T, 1}).set_stride({a.Hq * a.T, a.T, 1, 1});
}

// Lets the frontend validate the graph (it also checks what this cuDNN and
// GPU support, so a failure is a refusal too, said apart in the message),
// then cuDNN build it for this GPU.
std::unique_ptr<AttentionGraph> build(std::shared_ptr<fe::graph::Graph> g, int device, const char* what) {
  auto plan = std::make_unique<AttentionGraph>();
  try {
    fe::error_t valid = g->validate();
    fe::error_t built = valid;
    if (valid.is_good()) built = g->build_operation_graph(cudnn_handle(device));
    if (built.is_good()) built = g->create_execution_plans({fe::HeurMode_t::A});
    if (built.is_good()) built = g->check_support();
    if (built.is_good()) built = g->build_plans();
    if (valid.is_bad()) {
      plan->refusal = std::string("cudnn-frontend rejects the ") + what + " graph: " + valid.get_message();
    } else if (built.is_bad()) {
      plan->refusal = std::string("cuDNN refused the ") + what + " graph: " + built.get_message();
    } else if (fe::error_t ws = g->get_workspace_size(plan->workspace); ws.is_bad()) {
      plan->refusal = std::string("cuDNN gave no workspace size: ") + ws.get_message();
    }
  } catch (const std::exception& e) {  // the frontend throws on some backend errors
    plan->refusal = std::string("cuDNN refused the ") + what + " graph: " + e.what();
  }
  if (plan->refusal.empty()) {
    plan->graph = std::move(g);
  } else {
    QK_DEBUG("{}; qk's own flash-attention kernels take this shape", plan->refusal);
  }
  return plan;
}

int64_t bits_of(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// What a graph depends on: the shape, every stride, the options.
PlanKey key_of(const AttentionShape& a, int device, DType t, bool backward) {
  PlanKey k = {device, static_cast<int64_t>(t), backward, a.B, a.T, a.S, a.Hq, a.Hkv, a.D, a.Dv,
               a.q_sb, a.q_st, q_head_stride(a), a.k_sb, a.k_ss, a.k_sh, a.v_sb, a.v_ss, a.v_sh,
               a.causal, bits_of(a.scale)};
  if (backward) k.insert(k.end(), {a.o_sb, a.o_st, a.o_sh, a.g_sb, a.g_st, a.g_sh});
  return k;
}

void causal_options(const AttentionShape& a, auto& opts) {
  // T == S here (outside_cudnn): top-left and bottom-right are the same diagonal.
  if (a.causal) opts.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
}

// The graph for the call (built on first use), or nullptr inside a CUDA-graph capture when none was built
// before it: cuDNN's set-up must not run in a capture (an eager step first builds it).
const AttentionGraph* forward_graph(const AttentionShape& a, int device, DType t) {
  static PlanCache<AttentionGraph> cache("cudnn_attention_forward");
  const PlanKey key = key_of(a, device, t, false);
  if (capturing(device)) return cache.find(key);
  return &cache.get(key, [&] {
    auto g = new_graph(t);
    const Qkv in = qkv_inputs(*g, a);
    auto opts = fe::graph::SDPA_attributes().set_name("qk_attention").set_generate_stats(true).set_attn_scale(
        a.scale);
    causal_options(a, opts);
    auto [o, stats] = g->sdpa(in.q, in.k, in.v, opts);
    o->set_output(true).set_uid(kO).set_dim({a.B, a.Hq, a.T, a.Dv}).set_stride(bthd_strides(a.T, a.Hq, a.Dv));
    stats->set_output(true).set_uid(kStats);
    as_stats(*stats, a);
    return build(std::move(g), device, "forward");
  });
}

const AttentionGraph* backward_graph(const AttentionShape& a, int device, DType t) {
  static PlanCache<AttentionGraph> cache("cudnn_attention_backward");
  const PlanKey key = key_of(a, device, t, true);
  if (capturing(device)) return cache.find(key);
  return &cache.get(key, [&] {
    auto g = new_graph(t);
    const Qkv in = qkv_inputs(*g, a);
    TensorRef o = input(*g, "O", kO, {a.B, a.Hq, a.T, a.Dv}, {a.o_sb, a.o_sh, a.o_st, 1});
    TensorRef dout = input(*g, "dO", kDO, {a.B, a.Hq, a.T, a.Dv}, {a.g_sb, a.g_sh, a.g_st, 1});
    TensorRef stats = g->tensor(fe::graph::Tensor_attributes().set_name("Stats").set_uid(kStats));
    as_stats(*stats, a);
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("qk_attention_backward")
                    .set_attn_scale(a.scale)
                    .set_deterministic_algorithm(true);
    causal_options(a, opts);
    auto [dq, dk, dv] = g->sdpa_backward(in.q, in.k, in.v, o, dout, stats, opts);
    dq->set_output(true).set_uid(kDQ).set_dim({a.B, a.Hq, a.T, a.D}).set_stride(bthd_strides(a.T, a.Hq, a.D));
    dk->set_output(true).set_uid(kDK).set_dim({a.B, a.Hkv, a.S, a.D}).set_stride(bthd_strides(a.S, a.Hkv, a.D));
    dv->set_output(true).set_uid(kDV).set_dim({a.B, a.Hkv, a.S, a.Dv}).set_stride(bthd_strides(a.S, a.Hkv, a.Dv));
    return build(std::move(g), device, "backward");
  });
}

void* mut(const Tensor& t) { return const_cast<void*>(t.raw_data()); }

// Runs the call on cuDNN's graph for its shape and direction; false, with
// why, when cuDNN does not take it.
bool run(const AttentionShape& a, const Tensor& q, std::unordered_map<int64_t, void*> pack, cudaStream_t stream,
         std::string* why, bool backward) {
  const char* no = outside_cudnn(a, q.dtype());
  const int device = q.device().index;
  const AttentionGraph* plan = no ? nullptr
                               : backward ? backward_graph(a, device, q.dtype())
                                          : forward_graph(a, device, q.dtype());
  if (!plan || !plan->graph) {
    if (why) *why = no ? no : plan ? plan->refusal : "no cuDNN graph was built for this shape before the capture";
    return false;
  }
  cudnnHandle_t h = cudnn_handle(device);
  QK_CUDNN_CHECK(cudnnSetStream(h, stream));
  const Tensor ws = empty({std::max<int64_t>(plan->workspace, 1)}, TensorOptions(DType::u8).device(q.device()));
  fe::error_t st = plan->graph->execute(h, pack, mut(ws));
  QK_CHECK_DEVICE(st.is_good(), "cuDNN fused attention (", backward ? "backward" : "forward", ") failed on ",
                  q.device().str(), ": ", st.get_message());
  return true;
}

}  // namespace

bool cudnn_attention_forward(const AttentionShape& a, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, cudaStream_t stream, std::string* why) {
  return run(a, q, {{kQ, mut(q)}, {kK, mut(k)}, {kV, mut(v)}, {kO, mut(out)}, {kStats, mut(lse)}}, stream, why,
             false);
}

bool cudnn_attention_backward(const AttentionShape& a, const Tensor& dout, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv, cudaStream_t stream, std::string* why) {
  return run(a, q,
             {{kQ, mut(q)}, {kK, mut(k)}, {kV, mut(v)}, {kO, mut(out)}, {kDO, mut(dout)}, {kStats, mut(lse)},
              {kDQ, mut(dq)}, {kDK, mut(dk)}, {kDV, mut(dv)}},
             stream, why, true);
}

}  // namespace qk::cuda
