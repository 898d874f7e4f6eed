// oneDNN convolution primitives with a per-shape cache (see onednn.h).
#include "cpu/onednn.h"

#include "qk/base/error.h"

// oneDNN here runs on OpenMP; both come together (src/tensor/CMakeLists.txt).
#if defined(QK_HAVE_DNNL) && defined(_OPENMP)

#include <omp.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "cpu/onednn_dtype.h"

#include "qk/base/env.h"
#include "qk/base/signal_mask.h"
#include "qk/base/thread_pool.h"
#include "qk/tensor/ops/memory_format.h"
#include "qk/tensor/ops/view.h"
#include "cpu/conv.h"

namespace qk::cpu::onednn {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dims = memory::dims;

struct Runtime {
  dnnl::engine engine;
  dnnl::stream stream;
  Runtime() : engine(dnnl::engine::kind::cpu, 0), stream(engine) {}
};

Runtime* runtime() {
  static Runtime* rt = []() -> Runtime* {
    try {
      return new Runtime();
    } catch (const dnnl::error&) {
      return nullptr;
    }
  }();
  return rt;
}

// oneDNN's OpenMP threads follow qk's thread count (and stay at one inside a
// qk parallel region, where the cores are taken).
void set_threads() { omp_set_num_threads(in_parallel_region() ? 1 : num_threads()); }

// Every primitive here is made with a user scratchpad (as PyTorch's ideep
// does): oneDNN's own is malloc'ed and freed around each call, and a large
// one is a fresh mapping whose pages fault in again. Ours comes from the
// tensor allocator, whose cache keeps large blocks mapped.
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

// Runs `p` (made with user_scratchpad()) to completion, with a scratchpad of
// `pad`'s size when it needs one.
void run(const dnnl::primitive& p, const memory::desc& pad, std::unordered_map<int, memory> args) {
  Tensor buf;
  if (pad.get_size() > 0) {
    buf = empty({static_cast<int64_t>(pad.get_size())}, TensorOptions(DType::u8));
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(pad, runtime()->engine, buf.raw_data()));
  }
  const AsyncSignalsBlocked no_signals;  // Note [Signals during JIT GEMM]: gemm-based convolutions
  p.execute(runtime()->stream, args);
  runtime()->stream.wait();  // before buf goes
}

// A tensor in the user's layout, and where the primitive wants it. When the
// two differ the tensor is reordered through a buffer that lives for one call
// only (released by Entry::Use): kept per cached primitive, these buffers held
// several activation-sized copies per conv shape for the life of the process
// (ResNet-18 training at batch 64: about 600 MB of peak RSS).
struct Port {
  memory::desc user_md;
  memory::desc prim_md;
  bool reorder = false;
  Tensor held;              // the current call's buffer in prim_md's layout
  memory buf;               // a view of `held`
  dnnl::reorder to_prim;    // user -> buf (inputs)
  dnnl::reorder from_prim;  // buf -> user (outputs)
  memory::desc pad;         // the reorder's scratchpad

  void init(const memory::desc& user, const memory::desc& prim, bool is_output) {
    const dnnl::engine& eng = runtime()->engine;
    user_md = user;
    prim_md = prim;
    reorder = user != prim;
    if (!reorder) return;
    memory b(prim, eng, DNNL_MEMORY_NONE);
    memory u(user, eng, DNNL_MEMORY_NONE);
    if (is_output) {
      dnnl::reorder::primitive_desc pd(b, u, user_scratchpad());
      from_prim = dnnl::reorder(pd);
      pad = pd.scratchpad_desc();
    } else {
      dnnl::reorder::primitive_desc pd(u, b, user_scratchpad());
      to_prim = dnnl::reorder(pd);
      pad = pd.scratchpad_desc();
    }
  }
  memory& acquire() {
    held = empty({static_cast<int64_t>(prim_md.get_size())}, TensorOptions(DType::u8));
    buf = memory(prim_md, runtime()->engine, held.raw_data());
    return buf;
  }
  void release() {
    buf = memory();
    held = Tensor();
  }
  // The memory to hand to the primitive for user data at `p` (an input).
  memory in(void* p) {
    memory u(user_md, runtime()->engine, p);
    if (!reorder) return u;
    run(to_prim, pad, {{DNNL_ARG_FROM, u}, {DNNL_ARG_TO, acquire()}});
    return buf;
  }
  // The memory the primitive writes (an output); finish() copies it to `p`.
  memory out(void* p) { return reorder ? acquire() : memory(user_md, runtime()->engine, p); }
  void finish(void* p) {
    if (!reorder) return;
    memory u(user_md, runtime()->engine, p);
    run(from_prim, pad, {{DNNL_ARG_FROM, buf}, {DNNL_ARG_TO, u}});
  }
};

enum class Kind : int64_t { forward, backward_data, backward_weights };

struct Problem {
  Dims src, wei, dst, strides, dilates, pad;
  bool groups;
  memory::data_type dt;
};

Problem problem(const ConvGeom& g, DType dt) {
  Problem p;
  p.dt = dnnl_type(dt);
  p.src = {g.n, g.c, g.h, g.w};
  p.groups = g.g > 1;
  p.wei = p.groups ? Dims{g.g, g.og(), g.cg(), g.kh, g.kw} : Dims{g.o, g.c, g.kh, g.kw};
  p.dst = {g.n, g.o, g.ho, g.wo};
  p.strides = {g.sh, g.sw};
  p.dilates = {g.dh - 1, g.dw - 1};  // oneDNN counts the gaps
  p.pad = {g.ph, g.pw};
  return p;
}

memory::desc md(const Dims& d, Tag t, memory::data_type dt) { return memory::desc(d, dt, t); }

QK_ENV_INT(env_winograd, "QK_CONV_WINOGRAD", 1,
           "1: f32 3x3 stride-1 convolutions in blocked layouts let oneDNN choose its Winograd "
           "kernels per shape (convolution_auto); 0: direct convolution only.");

// Note [Winograd]: oneDNN's F(4x4, 3x3) Winograd kernels (jit_wino_4x3) do
// a 3x3 stride-1 convolution with 2.25x fewer multiplies, forward and both
// backwards. On ResNet-18 for CIFAR (batch 64, one thread, the 2-core
// development VM, Intel Xeon with AVX-512) they took inference from 82 to
// 120 img/s and training from 32 to 41 (two runs each, same binary); PyTorch's CPU convolutions ask oneDNN for direct ones. The
// transform rounds differently: the same model's loss agreed to 4 digits,
// and every parity test (PyTorch fixtures, finite differences) passes with
// it. convolution_auto leaves the choice per shape to oneDNN (direct where
// Winograd does not pay or does not apply: strides, 1x1, post-ops, bf16).
dnnl::algorithm conv_algorithm(const Problem& p, Layout layout) {
  bool wino = env_winograd.get() != 0 && p.dt == memory::data_type::f32 &&
              layout != Layout::plain && p.wei.size() == 4 && p.wei[2] == 3 && p.wei[3] == 3 &&
              p.strides == Dims{1, 1} && p.dilates == Dims{0, 0};
  return wino ? dnnl::algorithm::convolution_auto : dnnl::algorithm::convolution_direct;
}

// The descriptors a primitive is created with: `any` lets oneDNN pick each
// primitive's own blocked layout (backward-data wants its weights blocked
// differently from forward; forcing forward's layout on it falls back to
// oneDNN's slow reference kernel).
struct Descs {
  memory::desc src, wei, dst;
};
Descs descs(const Problem& p, Layout layout) {
  // channels_last: as blocked, oneDNN's choice (its user side is NHWC).
  const bool blocked = layout != Layout::plain;
  return {md(p.src, blocked ? Tag::any : Tag::nchw, p.dt),
          md(p.wei, blocked ? Tag::any : (p.groups ? Tag::goihw : Tag::oihw), p.dt),
          md(p.dst, blocked ? Tag::any : Tag::nchw, p.dt)};
}

// How x, y, dx and grad_out are stored in qk's tensors.
Tag activation_tag(Layout layout) { return layout == Layout::channels_last ? Tag::nhwc : Tag::nchw; }

// Bits of a forward's fused epilogue (Epilogue), part of the cache key.
constexpr int64_t kAffine = 1, kRelu = 2;

int64_t epi_bits(const Epilogue& e) {
  return (e.scale.defined() ? kAffine : 0) | (e.relu ? kRelu : 0);
}

// Per-channel operand of a binary post-op: [1, O, 1, 1].
memory::desc channel_md(const Problem& p) { return md({1, p.dst[1], 1, 1}, Tag::nchw, p.dt); }

// The post-ops of an epilogue, in Epilogue's order: *scale, +shift, relu.
dnnl::primitive_attr epilogue_attr(const Problem& p, int64_t bits) {
  dnnl::post_ops po;
  if (bits & kAffine) {
    po.append_binary(dnnl::algorithm::binary_mul, channel_md(p));
    po.append_binary(dnnl::algorithm::binary_add, channel_md(p));
  }
  if (bits & kRelu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  dnnl::primitive_attr attr = user_scratchpad();
  attr.set_post_ops(po);
  return attr;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Problem& p, Layout layout, bool bias,
                                                     int64_t epi = 0) {
  auto [src, wei, dst] = descs(p, layout);
  auto kind = dnnl::prop_kind::forward_training;
  auto algo = conv_algorithm(p, layout);
  auto& eng = runtime()->engine;
  const dnnl::primitive_attr attr = epilogue_attr(p, epi);
  if (bias) {
    dnnl::convolution_forward::desc d(kind, algo, src, wei, md({p.dst[1]}, Tag::x, p.dt), dst,
                                      p.strides, p.dilates, p.pad, p.pad);
    return {d, attr, eng};
  }
  dnnl::convolution_forward::desc d(kind, algo, src, wei, dst, p.strides, p.dilates, p.pad,
                                    p.pad);
  return {d, attr, eng};
}

// One cached primitive with its ports (src/weights/dst in the forward
// sense: for backward data, "src" is dx and an output).
struct Entry {
  std::mutex mu;
  dnnl::primitive prim;
  std::string impl;  // oneDNN's name of the kernel (tests, logs)
  memory::desc pad;  // its scratchpad
  Port src, wei, dst;
  // Held for one call: locks the entry and frees the ports' buffers at the
  // end (the callers wait for the stream before leaving the scope).
  struct Use {
    explicit Use(Entry& en) : e(en), lk(en.mu) {}
    ~Use() {
      e.src.release();
      e.wei.release();
      e.dst.release();
    }
    Entry& e;
    std::lock_guard<std::mutex> lk;
  };
};

using Key = std::array<int64_t, 20>;

Key make_key(const ConvGeom& g, DType dt, Kind kind, Layout layout, bool bias, int64_t epi) {
  return {g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.g, g.sh, g.sw,
          g.ph, g.pw, g.dh, g.dw, static_cast<int64_t>(kind), static_cast<int64_t>(layout),
          bias, static_cast<int64_t>(dt), epi, 0};
}

std::mutex cache_mu;
std::map<Key, std::unique_ptr<Entry>>& cache() {
  static auto* c = new std::map<Key, std::unique_ptr<Entry>>();
  return *c;
}

std::unique_ptr<Entry> build(const ConvGeom& g, DType dt, Kind kind, Layout layout, bool bias,
                             int64_t epi = 0) {
  Problem p = problem(g, dt);
  auto e = std::make_unique<Entry>();
  auto user_src = md(p.src, activation_tag(layout), p.dt);
  auto user_wei = md(p.wei, p.groups ? Tag::goihw : Tag::oihw, p.dt);
  auto user_dst = md(p.dst, activation_tag(layout), p.dt);
  auto& eng = runtime()->engine;
  auto algo = conv_algorithm(p, layout);
  if (kind == Kind::forward) {
    dnnl::convolution_forward::primitive_desc fwd;
    try {
      fwd = forward_pd(p, layout, bias, epi);
    } catch (const dnnl::error&) {
      if (!epi) throw;
      return e;  // no kernel for this fusion: an entry without a primitive
    }
    e->prim = dnnl::convolution_forward(fwd);
    e->impl = fwd.impl_info_str();
    e->pad = fwd.scratchpad_desc();
    e->src.init(user_src, fwd.src_desc(), false);
    e->wei.init(user_wei, fwd.weights_desc(), false);
    e->dst.init(user_dst, fwd.dst_desc(), true);
    return e;
  }
  auto fwd = forward_pd(p, layout, bias);
  if (kind == Kind::backward_data) {
    auto [src, wei, dst] = descs(p, layout);
    dnnl::convolution_backward_data::desc d(algo, src, wei, dst, p.strides, p.dilates, p.pad,
                                            p.pad);
    dnnl::convolution_backward_data::primitive_desc pd(d, user_scratchpad(), eng, fwd);
    e->pad = pd.scratchpad_desc();
    e->prim = dnnl::convolution_backward_data(pd);
    e->impl = pd.impl_info_str();
    e->src.init(user_src, pd.diff_src_desc(), true);
    e->wei.init(user_wei, pd.weights_desc(), false);
    e->dst.init(user_dst, pd.diff_dst_desc(), false);
  } else {
    auto [src, wei, dst] = descs(p, layout);
    dnnl::convolution_backward_weights::desc d(algo, src, wei, dst, p.strides, p.dilates, p.pad,
                                               p.pad);
    dnnl::convolution_backward_weights::primitive_desc pd(d, user_scratchpad(), eng, fwd);
    e->pad = pd.scratchpad_desc();
    e->prim = dnnl::convolution_backward_weights(pd);
    e->impl = pd.impl_info_str();
    e->src.init(user_src, pd.src_desc(), false);
    e->wei.init(user_wei, pd.diff_weights_desc(), true);
    e->dst.init(user_dst, pd.diff_dst_desc(), false);
  }
  return e;
}

Entry& entry(const ConvGeom& g, DType dt, Kind kind, Layout layout, bool bias, int64_t epi = 0) {
  Key key = make_key(g, dt, kind, layout, bias, epi);
  std::lock_guard<std::mutex> lk(cache_mu);
  auto& slot = cache()[key];
  if (!slot) slot = build(g, dt, kind, layout, bias, epi);
  return *slot;
}

[[noreturn]] void rethrow(const dnnl::error& e, const char* op, const ConvGeom& g) {
  QK_THROW(Error, op, ": oneDNN failed (", e.what(), ", status ", static_cast<int>(e.status),
           ") for x [", g.n, ", ", g.c, ", ", g.h, ", ", g.w, "], w [", g.o, ", ", g.cg(), ", ",
           g.kh, ", ", g.kw, "], groups ", g.g,
           "; set QK_CONV_ALGO=im2col to use the built-in kernels instead");
}

}  // namespace

bool available() { return runtime() != nullptr; }

bool supports(DType dt) {
  if (dt == DType::f32) return available();
  if (dt != DType::bf16 || !available()) return false;
  // bf16 kernels need AVX-512 (emulated) or AMX/AVX512-BF16; ask oneDNN by
  // creating a small primitive once.
  static const bool ok = [] {
    try {
      ConvGeom g{};
      g.n = 1, g.c = 16, g.h = 8, g.w = 8, g.o = 16, g.kh = 3, g.kw = 3, g.g = 1;
      g.sh = g.sw = 1, g.ph = g.pw = 1, g.dh = g.dw = 1, g.ho = 8, g.wo = 8;
      for (Kind k : {Kind::forward, Kind::backward_data, Kind::backward_weights})
        build(g, DType::bf16, k, Layout::blocked, false);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

void clear_cache() {
  std::lock_guard<std::mutex> lk(cache_mu);
  cache().clear();
}

std::array<std::string, 3> kernel_names(const ConvGeom& g, DType dt, Layout layout) {
  std::array<std::string, 3> out;
  for (Kind k : {Kind::forward, Kind::backward_data, Kind::backward_weights})
    out[static_cast<size_t>(k)] = entry(g, dt, k, layout, false).impl;
  return out;
}

bool winograd_chosen(const ConvGeom& g, DType dt, bool relu) {
  if (!winograd_applies(g, dt)) return false;
  try {
    const Entry& e = entry(g, dt, Kind::forward, Layout::blocked, true, relu ? kRelu : 0);
    return e.impl.find("wino") != std::string::npos;
  } catch (const dnnl::error&) {
    return false;
  }
}

bool winograd_applies(const ConvGeom& g, DType dt) {
  return dt == DType::f32 && conv_algorithm(problem(g, dt), Layout::blocked) ==
                                 dnnl::algorithm::convolution_auto;
}

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeom& g,
                      Layout layout) {
  return conv2d_forward_fused(x, w, b, g, layout, Epilogue{});
}

Tensor conv2d_forward_fused(const Tensor& x, const Tensor& w, const Tensor& b, const ConvGeom& g,
                            Layout layout, const Epilogue& epi) {
  const DType dt = x.dtype();
  QK_INTERNAL_ASSERT(supports(dt) && w.dtype() == dt && (!b.defined() || b.dtype() == dt));
  const int64_t bits = epi_bits(epi);
  Tensor y = ops::empty({g.n, g.o, g.ho, g.wo}, TensorOptions(dt).device(x.device()),
                        layout == Layout::channels_last ? ops::MemoryFormat::channels_last
                                                        : ops::MemoryFormat::contiguous);
  if (y.numel() == 0) return y;
  try {
    Entry& e = entry(g, dt, Kind::forward, layout, b.defined(), bits);
    if (!e.prim) return Tensor();  // no kernel for this fusion (build() throws without one)
    Entry::Use use(e);
    set_threads();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.src.in(x.raw_data())},
                                         {DNNL_ARG_WEIGHTS, e.wei.in(w.raw_data())},
                                         {DNNL_ARG_DST, e.dst.out(y.raw_data())}};
    auto& eng = runtime()->engine;
    if (b.defined())
      args.emplace(DNNL_ARG_BIAS, memory(md({g.o}, Tag::x, dnnl_type(dt)), eng, b.raw_data()));
    if (bits & kAffine) {
      const memory::desc cmd = channel_md(problem(g, dt));
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                   memory(cmd, eng, epi.scale.raw_data()));
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1,
                   memory(cmd, eng, epi.shift.raw_data()));
    }
    run(e.prim, e.pad, args);
    e.dst.finish(y.raw_data());
    runtime()->stream.wait();
  } catch (const dnnl::error& err) {
    rethrow(err, bits ? "conv2d (fused)" : "conv2d", g);
  }
  return y;
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor& grad_out, const Tensor& x,
                                                   const Tensor& w, const ConvGeom& g,
                                                   bool need_dx, bool need_dw, bool need_db,
                                                   Layout layout) {
  const DType dt = x.dtype();
  QK_INTERNAL_ASSERT(supports(dt) && w.dtype() == dt && grad_out.dtype() == dt);
  auto opts = TensorOptions(dt).device(x.device());
  Tensor dx = need_dx ? ops::empty(x.shape(), opts, layout == Layout::channels_last
                                                        ? ops::MemoryFormat::channels_last
                                                        : ops::MemoryFormat::contiguous)
                      : Tensor();
  Tensor dw = need_dw ? empty(w.shape(), opts) : Tensor();
  if (grad_out.numel() == 0) {
    if (need_dx) dx.zero_();
    if (need_dw) dw.zero_();
  } else {
    try {
      auto& strm = runtime()->stream;
      auto run_data = [&](Entry& e, const memory& ddst) {
        run(e.prim, e.pad, {{DNNL_ARG_DIFF_DST, ddst},
                              {DNNL_ARG_WEIGHTS, e.wei.in(w.raw_data())},
                              {DNNL_ARG_DIFF_SRC, e.src.out(dx.raw_data())}});
        e.src.finish(dx.raw_data());
      };
      auto run_weights = [&](Entry& e, const memory& ddst) {
        run(e.prim, e.pad, {{DNNL_ARG_DIFF_DST, ddst},
                              {DNNL_ARG_SRC, e.src.in(x.raw_data())},
                              {DNNL_ARG_DIFF_WEIGHTS, e.wei.out(dw.raw_data())}});
        e.wei.finish(dw.raw_data());
      };
      void* dy = grad_out.raw_data();
      if (need_dx && need_dw) {
        // Both primitives usually want grad_out in the same blocked layout:
        // reorder it once.
        Entry& ed = entry(g, dt, Kind::backward_data, layout, false);
        Entry& ew = entry(g, dt, Kind::backward_weights, layout, false);
        Entry::Use use_d(ed), use_w(ew);  // always in this order: no deadlock
        set_threads();
        memory ddst = ed.dst.in(dy);
        run_data(ed, ddst);
        run_weights(ew, ew.dst.prim_md == ed.dst.prim_md ? ddst : ew.dst.in(dy));
        strm.wait();
      } else if (need_dx) {
        Entry& e = entry(g, dt, Kind::backward_data, layout, false);
        Entry::Use use(e);
        set_threads();
        run_data(e, e.dst.in(dy));
        strm.wait();
      } else if (need_dw) {
        Entry& e = entry(g, dt, Kind::backward_weights, layout, false);
        Entry::Use use(e);
        set_threads();
        run_weights(e, e.dst.in(dy));
        strm.wait();
      }
    } catch (const dnnl::error& err) {
      rethrow(err, "conv2d_backward", g);
    }
  }
  Tensor db = need_db ? conv2d_bias_grad(grad_out) : Tensor();
  return {dx, dw, db};
}

}  // namespace qk::cpu::onednn

#else  // no oneDNN

namespace qk::cpu::onednn {

bool available() { return false; }
bool supports(DType) { return false; }
bool winograd_applies(const ConvGeom&, DType) { return false; }
bool winograd_chosen(const ConvGeom&, DType, bool) { return false; }
std::array<std::string, 3> kernel_names(const ConvGeom&, DType, Layout) { return {}; }
void clear_cache() {}

Tensor conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const ConvGeom&, Layout) {
  QK_THROW(Error, "conv2d: this build of qianka has no oneDNN; use QK_CONV_ALGO=im2col");
}

Tensor conv2d_forward_fused(const Tensor&, const Tensor&, const Tensor&, const ConvGeom&, Layout,
                            const Epilogue&) {
  QK_THROW(Error, "conv2d: this build of qianka has no oneDNN; use QK_CONV_ALGO=im2col");
}

std::tuple<Tensor, Tensor, Tensor> conv2d_backward(const Tensor&, const Tensor&, const Tensor&,
                                                   const ConvGeom&, bool, bool, bool, Layout) {
  QK_THROW(Error, "conv2d_backward: this build of qianka has no oneDNN; use QK_CONV_ALGO=im2col");
}

}  // namespace qk::cpu::onednn

#endif
