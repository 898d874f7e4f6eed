// `qk sim calibrate`: this machine's rates as a cluster file (calibrate.h).
#include "qk/sim/calibrate.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "qk/autograd/functions.h"
#include "qk/autograd/llm_ops.h"
#include "qk/base/error.h"
#include "qk/base/host_info.h"
#include "qk/base/thread_pool.h"
#include "qk/base/timer.h"
#include "qk/optim/grad_unscale.h"
#include "qk/qccl/perf.h"
#include "qk/tensor/backend.h"
#include "qk/tensor/generator.h"
#include "qk/tensor/ops/elementwise.h"
#include "qk/tensor/ops/linalg.h"
#include "qk/tensor/ops/norm.h"
#include "qk/tensor/ops/optimizer.h"
#include "qk/transformer/functional.h"
#include "qk/transformer/moe.h"
#include "costs.h"
#include "stream_kinds.h"

namespace qk::sim {

namespace {

// The fastest of a few calls after a warm-up (a machine's rate is what it
// can do; neighbours and wake-ups only ever slow a call down).
// `before`, when given, runs untimed before each call.
double best_seconds(const std::function<void()>& fn, qk::Device dev, int reps,
                    const std::function<void()>& before = nullptr) {
  auto call = [&] {
    fn();
    if (!dev.is_cpu()) synchronize(dev);
  };
  call();
  double best = 1e30;
  const Timer total;
  for (int i = 0; i < reps || (total.seconds() < 0.05 && i < 50); ++i) {
    if (before) before();
    const Timer t;
    call();
    best = std::min(best, t.seconds());
  }
  return best;
}

// Evicts a CPU core's caches (writes 32 MB, past any core's L2): a training
// step's GEMM reads weights last touched a whole pass earlier, so GEMMs
// are timed from cold caches. Timed hot, the small GEMMs of a small model
// ran 5-25% faster than in training on the 2-core VM (256x1024x256: best
// 134 GFLOP/s hot, 123 cold; medians 129 and 113).
class CacheEvictor {
 public:
  void operator()() {
    for (size_t i = 0; i < junk_.size(); i += 16) junk_[i] += 1.0f;  // one write per 64-byte line
  }

 private:
  std::vector<float> junk_ = std::vector<float>(size_t{8} << 20);
};

double host_memory_gb() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (f >> key) {
    if (key == "MemTotal:") {
      f >> kb;
      break;
    }
    std::string rest;
    std::getline(f, rest);
  }
  return kb * 1024.0 / 1e9;
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

// Runs child(rank) in `ranks` processes forked at once; each child's doubles come back through a pipe
// (one write each, below PIPE_BUF: children's reports do not interleave). Returns false when a fork
// failed or a child did not exit 0; `values` gets every child's doubles in the order they arrived.
bool run_forked(int ranks, const std::function<std::vector<double>(int)>& child, std::vector<double>* values) {
  int fds[2];
  if (::pipe(fds) != 0) return false;
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) break;
    if (pid == 0) {
      ::close(fds[0]);
      int code = 1;
      try {
        const std::vector<double> v = child(r);
        const auto bytes = static_cast<ssize_t>(v.size() * sizeof(double));
        code = v.empty() || ::write(fds[1], v.data(), static_cast<size_t>(bytes)) == bytes ? 0 : 2;
      } catch (...) {
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  ::close(fds[1]);
  values->clear();
  for (double d = 0; ::read(fds[0], &d, sizeof d) == static_cast<ssize_t>(sizeof d);) values->push_back(d);
  ::close(fds[0]);
  bool ok = static_cast<int>(pids.size()) == ranks;
  for (pid_t p : pids) {
    int st = 0;
    while (::waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  return ok;
}

// qccl between two forked ranks of this host: an all-reduce of 8 bytes
// (latency: a 2-rank ring is 2 steps) and of 4 MiB (bandwidth), as rank 0
// times them.
bool measure_link(Link& link, const std::function<void(const std::string&)>& say) {
  qcclUniqueId id;
  if (qcclGetUniqueId(&id) != qcclSuccess) return false;
  std::vector<double> v;
  const bool ok = run_forked(
      2,
      [&](int r) -> std::vector<double> {
        qcclComm_t comm;
        if (qcclCommInitRank(&comm, 2, id, r) != qcclSuccess) throw std::runtime_error("qccl init");
        qccl::PerfOptions o;
        o.iters = 20;
        o.warmup = 5;
        o.check = false;
        qccl::PerfBenchmark bench(comm, o);
        const qccl::PerfRow small = bench.run_size(8), big = bench.run_size(size_t(4) << 20);
        qcclCommDestroy(comm);
        if (r != 0) return {};
        return {small.out_of_place.us, big.out_of_place.us};
      },
      &v);
  if (!ok || v.size() != 2) return false;
  const double bytes = 4.0 * 1024 * 1024;
  link.latency_us = v[0] / 2;
  // (The floor is a microsecond: a floor of 1e-3 s here had capped every host at 4.19 GB/s.)
  link.bandwidth_gb_s = bytes / std::max(1e-6, (v[1] - v[0]) * 1e-6) / 1e9;
  say(fmt::format("qccl between 2 ranks: all-reduce 8 B {:.1f} us, 4 MiB {:.1f} us -> {:.1f} us per message, "
                  "{:.2f} GB/s", v[0], v[1], link.latency_us, link.bandwidth_gb_s));
  return true;
}

// How much ranks sharing this host's cores slow each other (the caches and
// memory bandwidth they share; with more ranks than cores, time slicing
// too): a small layer's forward and backward (layer norm, two GEMMs, GELU),
// run `iters` times alone and then in `ranks` forked processes at once, one
// thread each. On a shared machine one such pair is as noisy as the effect
// (a lucky "alone" run once gave 52% where the rounds around it gave
// 94-100%), so the pair is repeated and the median of the rounds' ratios
// taken. Returns a rank's rate shared over its fair share of its rate alone
// (all of it up to `cores` ranks, cores / ranks beyond), or 0 when it could
// not be measured.
double measure_sharing(int ranks, int cores, bool quick, Generator& gen, const std::function<void(const std::string&)>& say) {
  const int64_t n = 512, h = 512, f = 2048;  // ~30 MB live: beyond a core's cache, as training is
  const Tensor x = randn({n, h}, {}, gen), w1 = randn({f, h}, {}, gen) * 0.02, w2 = randn({h, f}, {}, gen) * 0.02;
  const Tensor lw = ones({h}), lb = zeros({h}), g = randn({n, h}, {}, gen);
  auto step = [&] {
    const Tensor xi = x.detach().requires_grad_(), a = w1.detach().requires_grad_(), b = w2.detach().requires_grad_();
    linear(gelu(linear(layer_norm(xi, {h}, lw, lb, 1e-5), a)), b).backward(g);
  };
  const int iters = quick ? 3 : 10, rounds = quick ? 1 : 5;
  auto run = [&] {
    for (int i = 0; i < 2; ++i) step();
    const Timer t;
    for (int i = 0; i < iters; ++i) step();
    return t.seconds();
  };
  // Seconds of each of `ranks` forked runs at once, averaged; 0 on failure.
  auto shared_run = [&]() -> double {
    std::vector<double> each;
    if (!run_forked(ranks, [&](int) { return std::vector<double>{run()}; }, &each) ||
        static_cast<int>(each.size()) != ranks)
      return 0;
    double sum = 0;
    for (const double s : each) sum += s;
    return sum / ranks;
  };
  std::vector<double> ratios;
  double alone_sum = 0, shared_sum = 0;
  for (int r = 0; r < rounds; ++r) {
    const double alone = run(), shared = shared_run();
    if (shared <= 0) return 0;
    ratios.push_back(alone / shared * std::max(1.0, static_cast<double>(ranks) / cores));
    alone_sum += alone;
    shared_sum += shared;
  }
  std::sort(ratios.begin(), ratios.end());
  const double eff = std::clamp(ratios[ratios.size() / 2], 0.05, 1.0);
  std::string each;
  for (const double q : ratios) each += fmt::format("{}{:.0f}%", each.empty() ? "" : " ", 100 * q);
  say(fmt::format("{} ranks at once on {} cores: a small layer's step {:.2f} ms each, {:.2f} ms alone -> {:.0f}% of "
                  "{} (median of {} rounds: {})",
                  ranks, cores, 1e3 * shared_sum / rounds / iters, 1e3 * alone_sum / rounds / iters, 100 * eff,
                  ranks > cores ? fmt::format("its share of the cores ({:.2f})", static_cast<double>(cores) / ranks)
                                : std::string("the rate alone"),
                  rounds, each));
  return eff;
}

// One size of a streaming kind: its real op's forward (from fresh leaves,
// grad mode on, as in training) and backward, the GEMM seconds inside them
// that the model prices apart (the attention core's, the loss's logits),
// and the bytes the model counts for each pass (stream_kinds.h).
struct KindSize {
  std::function<Tensor()> forward;
  Tensor grad;  // what the output's backward starts from (undefined: a scalar)
  double bytes_fwd = 0, bytes_bwd = 0;
  double gemm_fwd = 0, gemm_bwd = 0;
};

// Times one size: {forward, backward} seconds beyond the GEMMs. A kind
// whose op computes its gradients in the forward (the fused output layer
// and loss) has its time split between the passes by the model's bytes.
// Where the GEMMs' estimate leaves (almost) nothing, the kind is taken at
// the device's streaming bandwidth `floor_gb_s`: its own time is then below
// the estimate's error.
std::pair<double, double> time_kind(const KindSize& k, qk::Device dev, int reps, bool fused_backward,
                                    double floor_gb_s) {
  const double fwd = best_seconds([&] { k.forward(); }, dev, reps);
  const double both = best_seconds(
      [&] {
        const Tensor out = k.forward();
        out.backward(k.grad);
      },
      dev, reps);
  const double bw = floor_gb_s * 1e9;
  if (fused_backward) {
    const double rest = std::max((k.bytes_fwd + k.bytes_bwd) / bw, both - k.gemm_fwd - k.gemm_bwd);
    const double share = k.bytes_fwd / (k.bytes_fwd + k.bytes_bwd);
    return {rest * share, rest * (1 - share)};
  }
  if (k.gemm_fwd == 0 && k.gemm_bwd == 0) return {fwd, std::max(1e-9, both - fwd)};
  return {std::max(k.bytes_fwd / bw, fwd - k.gemm_fwd), std::max(k.bytes_bwd / bw, both - fwd - k.gemm_bwd)};
}

// Each kind the model prices (stream_kinds.h) measured with the op the
// trainer runs, at three sizes, f32.
void calibrate_stream_kinds(Device& d, const Cluster& c, qk::Device dev, bool quick, int reps, Generator& gen,
                            const std::function<void(const std::string&)>& say) {
  using streams::Pass;
  const DeviceRates rates(c, "fp32", 1);
  const int64_t D = 64;
  // (tokens, hidden, sequence, vocabulary) of the sizes: a small layer's
  // (from cache), a small GPT's micro-batch, and a larger one.
  struct Size {
    int64_t n, h, t, v;
  };
  const std::vector<Size> sizes = quick ? std::vector<Size>{{32, 64, 16, 256}, {128, 128, 64, 512}}
                                        : std::vector<Size>{{64, 256, 64, 1024}, {256, 256, 128, 4096},
                                                            {1024, 512, 512, 4096}};
  auto leaf = [&](const Shape& shape) { return randn(shape, {}, gen).to(dev).requires_grad_(); };
  auto fresh = [](const Tensor& t) { return t.detach().requires_grad_(); };
  auto grad_for = [&](const Tensor& out) { return randn(out.shape(), {}, gen).to(dev); };
  using Make = std::function<KindSize(const Size&)>;
  // A kind with no GEMM inside: its op and the model's bytes each way.
  auto plain = [&](std::function<Tensor()> forward, double bytes_fwd, double bytes_bwd) {
    KindSize k;
    k.forward = std::move(forward);
    k.grad = grad_for(k.forward());
    k.bytes_fwd = bytes_fwd;
    k.bytes_bwd = bytes_bwd;
    return k;
  };
  // The unfused attention core (q, k, v strided views of one projection, as
  // the layer splits them), less its two batched GEMMs each way.
  auto attention = [&](bool drop) -> Make {
    return [&, drop](const Size& z) {
      const int64_t b = z.n / z.t, heads = z.h / D;
      const Tensor qkv = randn({b, z.t, heads, 3, D}, {}, gen).to(dev);
      const Tensor q = qkv.select(3, 0), kk = qkv.select(3, 1), v = qkv.select(3, 2);
      transformer::CoreAttentionOptions o;
      o.causal = true;
      o.dropout_p = drop ? 0.1 : 0.0;
      o.training = true;
      o.generator = &gen;
      KindSize k;
      k.forward = [=] { return transformer::core_attention(fresh(q), fresh(kk), fresh(v), o); };
      k.grad = grad_for(k.forward());
      const double t = double(z.t), bh = double(b * heads), scores = bh * t * t;
      k.gemm_fwd = rates.gemm(t, t, double(D), bh) + rates.gemm(t, double(D), t, bh);
      k.gemm_bwd = 2 * k.gemm_fwd;
      k.bytes_fwd = streams::softmax(Pass::forward, 4, drop, scores);
      k.bytes_bwd = streams::softmax(Pass::backward, 4, drop, scores);
      return k;
    };
  };
  const std::vector<std::pair<std::string, Make>> kinds = {
      {"layer_norm",
       [&](const Size& z) {
         const Tensor x = leaf({z.n, z.h}), w = leaf({z.h}), b = leaf({z.h});
         const double e = double(z.n * z.h);
         return plain([=] { return layer_norm(fresh(x), {z.h}, fresh(w), fresh(b), 1e-5); },
                      streams::norm(Pass::forward, 4, e), streams::norm(Pass::backward, 4, e));
       }},
      {"rms_norm",
       [&](const Size& z) {
         const Tensor x = leaf({z.n, z.h}), w = leaf({z.h});
         const double e = double(z.n * z.h);
         return plain([=] { return rms_norm(fresh(x), {z.h}, fresh(w), 1e-5); }, streams::norm(Pass::forward, 4, e),
                      streams::norm(Pass::backward, 4, e));
       }},
      {"residual",
       [&](const Size& z) {
         const Tensor x = leaf({z.n, z.h}), r = leaf({z.n, z.h});
         const double e = double(z.n * z.h);
         return plain([=] { return fresh(r) + fresh(x); }, streams::residual(Pass::forward, 4, 0, e),
                      streams::residual(Pass::backward, 4, 0, e));
       }},
      {"dropout_add",
       [&](const Size& z) {
         const Tensor x = leaf({z.n, z.h}), r = leaf({z.n, z.h});
         const double e = double(z.n * z.h);
         return plain([=, &gen] { return fresh(r) + dropout(fresh(x), 0.1, true, gen); },
                      streams::residual(Pass::forward, 4, 1, e), streams::residual(Pass::backward, 4, 1, e));
       }},
      {"gelu",
       [&](const Size& z) {
         const Tensor x = leaf({z.n, 4 * z.h});
         const double e = double(z.n * 4 * z.h);
         return plain([=] { return transformer::mlp_activation(fresh(x), transformer::Activation::gelu, false); },
                      streams::activation(Pass::forward, false, 4, e), streams::activation(Pass::backward, false, 4, e));
       }},
      {"swiglu",
       [&](const Size& z) {
         const Tensor x = leaf({z.n, 8 * z.h});
         const double e = double(z.n * 4 * z.h);
         return plain([=] { return transformer::mlp_activation(fresh(x), transformer::Activation::silu, true); },
                      streams::activation(Pass::forward, true, 4, e), streams::activation(Pass::backward, true, 4, e));
       }},
      {"rope",
       [&](const Size& z) {
         const Tensor x = leaf({z.n / z.t, z.t, z.h / D, D});
         const transformer::RotaryTables tab = transformer::rotary_tables(D, 10000, 0, z.t).to(dev);
         const double bytes = streams::rope(4, double(z.n * z.h));
         return plain([=] { return transformer::apply_rotary_embedding(fresh(x), tab.cos, tab.sin); }, bytes, bytes);
       }},
      {"softmax", attention(false)},
      {"softmax_dropout", attention(true)},
      {"cross_entropy",
       [&](const Size& z) {
         // Megatron's init (std 0.02) keeps the logits small, as in training:
         // with std 1 the softmax's tails are denormal and every GEMM slows.
         const Tensor x = leaf({z.n, z.h}), w = (randn({z.v, z.h}, {}, gen) * 0.02).to(dev);
         const Tensor labels = randint(0, z.v, {z.n}, DType::i64, gen).to(dev);
         KindSize k;
         k.forward = [=] { return transformer::output_loss(fresh(x), fresh(w), labels); };
         const double n = double(z.n), v = double(z.v), h = double(z.h);
         k.gemm_fwd = rates.gemm(n, v, h);
         k.gemm_bwd = rates.gemm(n, h, v) + rates.gemm(v, h, n);
         k.bytes_fwd = streams::cross_entropy(Pass::forward, 4, n * v);
         k.bytes_bwd = streams::cross_entropy(Pass::backward, 4, n * v);
         return k;
       }},
      {"embedding",
       [&](const Size& z) {
         const Tensor w = leaf({z.v, z.h});
         const Tensor ids = randint(0, z.v, {z.n}, DType::i64, gen).to(dev);
         const double e = double(z.n * z.h);
         return plain([=] { return embedding(fresh(w), ids); }, streams::embedding(Pass::forward, 4, false, 0, e),
                      streams::embedding(Pass::backward, 4, false, 0, e));
       }},
      {"linear",
       [&](const Size& z) {
         // The trainer's linear layer with its bias, x [n, h] -> [n, 2h], less its three GEMMs.
         const int64_t out = 2 * z.h;
         const Tensor x = leaf({z.n, z.h}), b = leaf({out});
         const Tensor w = (randn({out, z.h}, {}, gen) * 0.02).to(dev);
         KindSize k;
         k.forward = [=] { return linear(fresh(x), fresh(w), fresh(b)); };
         k.grad = grad_for(k.forward());
         const double n = double(z.n), h = double(z.h), o = double(out);
         k.gemm_fwd = rates.gemm(n, o, h);
         k.gemm_bwd = rates.gemm(n, h, o) + rates.gemm(o, h, n);
         k.bytes_fwd = streams::linear(Pass::forward, 4, n * o);
         k.bytes_bwd = streams::linear(Pass::backward, 4, n * o);
         return k;
       }},
      {"moe_dispatch",
       [&](const Size& z) {
         // The trainer's MoE layer (4 experts, top 2, GELU, the all-to-all
         // dispatcher on one rank: Megatron's defaults otherwise), less what
         // the model prices apart: the router's and the experts' GEMMs (one
         // per expert) and the experts' GELU at the kind calibrated above.
         transformer::TransformerConfig cfg;
         cfg.num_layers = 1;
         cfg.hidden_size = z.h;
         cfg.num_attention_heads = z.h / D;
         cfg.ffn_hidden_size = 4 * z.h;
         cfg.seq_length = z.t;
         cfg.vocab_size = z.v;
         cfg.hidden_dropout = cfg.attention_dropout = 0;
         cfg.num_moe_experts = 4;
         cfg.moe_router_topk = 2;
         cfg.moe_aux_loss_coeff = 0.01;
         cfg.moe_token_dispatcher_type = transformer::MoETokenDispatcher::alltoall;
         cfg.validate();
         auto layer = std::make_shared<transformer::MoELayer>(cfg, 1);
         (*layer)->to(dev);
         const Tensor x = leaf({z.n / z.t, z.t, z.h});
         KindSize k;
         k.forward = [=] { return (*layer)->forward(fresh(x)); };
         k.grad = grad_for(k.forward());
         const double n = double(z.n), h = double(z.h), ffn = double(cfg.moe_ffn_hidden_size);
         const double experts = double(cfg.num_moe_experts), routed = n * double(cfg.moe_router_topk);
         const double rows = routed / experts, act = routed * ffn;
         k.gemm_fwd = rates.gemm(n, experts, h) + experts * (rates.gemm(rows, ffn, h) + rates.gemm(rows, h, ffn)) +
                      rates.stream(streams::key("gelu", Pass::forward), {streams::activation(Pass::forward, false, 4, act)});
         k.gemm_bwd = rates.gemm(n, h, experts) + rates.gemm(experts, h, n) +
                      experts * (rates.gemm(rows, h, ffn) + rates.gemm(ffn, h, rows) + rates.gemm(rows, ffn, h) +
                                 rates.gemm(h, ffn, rows)) +
                      rates.stream(streams::key("gelu", Pass::backward), {streams::activation(Pass::backward, false, 4, act)});
         const double bytes = streams::moe_scores(n, experts) + 2 * streams::moe_permute(4, routed, h);
         k.bytes_fwd = k.bytes_bwd = bytes;
         return k;
       }},
  };
  auto rates_of = [](const StreamKernel& x) {
    std::string r;
    for (const StreamSample& s : x.samples) r += fmt::format("{}{:.2f}", r.empty() ? "" : " / ", s.gb_s);
    return r;
  };
  for (const auto& [name, make] : kinds) {
    StreamKernel f, b;
    for (const Size& z : sizes) {
      const KindSize k = make(z);
      const auto [fs, bs] = time_kind(k, dev, reps, name == "cross_entropy", d.memory_bandwidth_gb_s);
      f.samples.push_back({k.bytes_fwd, k.bytes_fwd / fs / 1e9});
      b.samples.push_back({k.bytes_bwd, k.bytes_bwd / bs / 1e9});
    }
    say(fmt::format("{}: forward {} GB/s, backward {} GB/s (small to large)", name, rates_of(f), rates_of(b)));
    d.stream_kernels[streams::key(name, Pass::forward)] = std::move(f);
    d.stream_kernels[streams::key(name, Pass::backward)] = std::move(b);
  }
  // The per-parameter passes (stream_kinds.h) over as many f32 gradients as small to mid-size models'
  // ranks hold: a micro-batch's gradient added to the sum (autograd's accumulation and the gradient
  // buffer's are this add), and the optimizer's norm pass.
  const std::vector<int64_t> counts =
      quick ? std::vector<int64_t>{1 << 16, 1 << 18} : std::vector<int64_t>{1 << 18, 1 << 20, 1 << 22};
  StreamKernel accumulate, norm;
  for (const int64_t n : counts) {
    Tensor sum = randn({n}, {}, gen).to(dev);
    const Tensor g = randn({n}, {}, gen).to(dev);
    const double bytes_acc = streams::grad_accumulate(4, 4, double(n)), bytes_norm = streams::grad_norm(4, double(n));
    const double ta = best_seconds([&] { ops::add_(sum, g); }, dev, reps);
    const double tn = best_seconds([&] { optim::unscale_check_and_norm({g}, 1.0); }, dev, reps);
    accumulate.samples.push_back({bytes_acc, bytes_acc / ta / 1e9});
    norm.samples.push_back({bytes_norm, bytes_norm / tn / 1e9});
  }
  say(fmt::format("grad_accumulate: {} GB/s; grad_norm: {} GB/s (small to large)", rates_of(accumulate),
                  rates_of(norm)));
  d.stream_kernels["grad_accumulate"] = std::move(accumulate);
  d.stream_kernels["grad_norm"] = std::move(norm);
}

}  // namespace

Cluster calibrate(const CalibrateOptions& o, const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  QK_CHECK(o.device == "cpu" || o.device == "cuda", "qk sim calibrate --device: expected cpu or cuda, got '",
           o.device, "'");
  const qk::Device dev = o.device == "cpu" ? kCPU : qk::Device("cuda:0");
  if (!dev.is_cpu()) check_device_usable(dev);  // DeviceError saying why not
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int before = num_threads();
  const int threads = o.threads > 0 ? o.threads : (dev.is_cpu() ? 1 : before);
  if (dev.is_cpu()) set_num_threads(threads);
  struct Restore {
    int n;
    ~Restore() { set_num_threads(n); }
  } restore{before};
  const int reps = o.quick ? 2 : 5;
  Generator gen(4242);

  Cluster c;
  c.name = "local";
  c.description = fmt::format("this machine ({}), measured by qk sim calibrate --device {} with {} thread{} per rank",
                              dev.is_cpu() ? cpu_model_name() : std::string("cuda:0"), o.device, threads,
                              threads == 1 ? "" : "s");
  c.calibrated = fmt::format("qk sim calibrate --device {}, {}", o.device, now_utc());
  Device& d = c.device;
  d.model = dev.is_cpu() ? cpu_model_name() : "cuda:0";
  d.gemm.efficiency = 1.0;  // the samples are what is reached
  d.gemm.units = 1;

  // ---- GEMMs over the shapes a small transformer's layers run, from cold
  // caches, in the three layouts a linear layer runs them: forward x w^T,
  // backward g w and g^T x (one shape's layouts differ by up to 40% here, so
  // the forward alone misprices the backward's two thirds of the FLOPs). A
  // sample is the three's rate together: what the model's 2mnk forward and
  // backward GEMMs of that size cost in all.
  CacheEvictor evict;
  // The first two: an unfused attention core's per-head products (t x t x d and t x d x t, d = 32).
  std::vector<std::array<int64_t, 3>> shapes = {{128, 128, 32},    {128, 32, 128},     {128, 128, 128},
                                                {256, 256, 128},    {256, 256, 256},
                                                {256, 1024, 256},  {512, 512, 512},    {1024, 1024, 1024},
                                                {1024, 1536, 512}, {1024, 512, 512},   {1024, 2048, 512},
                                                {1024, 512, 2048}, {2048, 2048, 2048}, {4096, 512, 512},
                                                {256, 1024, 4096}};
  if (o.quick) shapes = {{128, 128, 128}, {256, 256, 256}, {512, 512, 512}};
  for (const DType dt : {DType::f32, DType::bf16}) {
    const std::string name = dt == DType::f32 ? "fp32" : "bf16";
    double peak = 0;
    for (const auto& [m, n, k] : shapes) {
      const Tensor x = randn({m, k}, {}, gen).to(dt).to(dev), w = randn({n, k}, {}, gen).to(dt).to(dev);
      const Tensor g = randn({m, n}, {}, gen).to(dt).to(dev);
      const std::function<void()> cold = dev.is_cpu() ? std::function<void()>(std::ref(evict)) : nullptr;
      const double fwd = best_seconds([&] { ops::linear(x, w, Tensor()); }, dev, reps, cold);
      const double dx = best_seconds([&] { ops::mm(g, w); }, dev, reps, cold);
      const double dw = best_seconds([&] { ops::mm(g.t(), x); }, dev, reps, cold);
      const double flops = 2.0 * static_cast<double>(m * n * k);
      const double rate = 3 * flops / (fwd + dx + dw);
      d.gemm.samples.push_back({m, n, k, name, rate});
      peak = std::max(peak, rate);
      say(fmt::format("gemm {}x{}x{} {}: {:.2f} GFLOP/s (x w^T {:.1f}, g w {:.1f}, g^T x {:.1f})", m, n, k, name,
                      rate / 1e9, flops / fwd / 1e9, flops / dx / 1e9, flops / dw / 1e9));
    }
    d.gemm.peak_flops[name] = peak;
  }

  // ---- streaming kernels: bytes moved per second
  const int64_t rows = o.quick ? 256 : 2048, width = 1024;
  std::vector<double> bw;
  {
    const Tensor x = randn({rows, width}, {}, gen).to(dev), y = randn({rows, width}, {}, gen).to(dev);
    const double s = best_seconds([&] { ops::add(x, y); }, dev, reps);
    bw.push_back(3.0 * 4 * static_cast<double>(rows * width) / s);
    say(fmt::format("elementwise add f32 {}x{}: {:.2f} GB/s", rows, width, bw.back() / 1e9));
    const Tensor wt = randn({width}, {}, gen).to(dev), bs = randn({width}, {}, gen).to(dev);
    const double n = best_seconds([&] { ops::layer_norm(x, {width}, wt, bs, 1e-5); }, dev, reps);
    bw.push_back(2.0 * 4 * static_cast<double>(rows * width) / n);
    say(fmt::format("layer norm f32 {}x{}: {:.2f} GB/s", rows, width, bw.back() / 1e9));
  }
  {
    const int64_t n = o.quick ? (1 << 18) : (1 << 22);
    const Tensor p = randn({n}, {}, gen).to(dev), g = randn({n}, {}, gen).to(dev);
    const Tensor m = zeros({n}).to(dev), v = zeros({n}).to(dev);
    ops::AdamStepArgs args;
    args.lr = 1e-4;
    args.beta1 = 0.9;
    args.beta2 = 0.95;
    args.eps = 1e-8;
    args.decoupled = true;
    const double s =
        best_seconds([&] { ops::adam_step_kernel.get(p.device())(p, g, m, v, Tensor(), args); }, dev, reps);
    bw.push_back(28.0 * static_cast<double>(n) / s);  // reads p, g, m, v; writes p, m, v
    say(fmt::format("AdamW step f32 {} elements: {:.2f} GB/s", n, bw.back() / 1e9));
  }
  std::sort(bw.begin(), bw.end());
  d.memory_bandwidth_gb_s = bw[bw.size() / 2] / 1e9;  // the median of the three
  d.memory_efficiency = 1.0;

  // ---- the shortest kernel
  {
    const Tensor x = randn({16}, {}, gen).to(dev), y = randn({16}, {}, gen).to(dev);
    d.kernel_floor_us = best_seconds([&] { ops::add(x, y); }, dev, reps * 10) * 1e6;
    say(fmt::format("shortest kernel (add of 16 elements): {:.2f} us", d.kernel_floor_us));
  }

  // ---- each streaming kind the model prices, with the trainer's own ops
  calibrate_stream_kinds(d, c, dev, o.quick, reps, gen, say);

  // ---- flash attention forward and backward, against the dtype's GEMM peak
  {
    const int64_t B = 1, T = o.quick ? 128 : 512, H = 8, D = 64;
    for (const DType dt : {DType::f32}) {
      Tensor q = randn({B, T, H, D}, {}, gen).to(dt).to(dev).requires_grad_(),
             k = randn({B, T, H, D}, {}, gen).to(dt).to(dev).requires_grad_(),
             v = randn({B, T, H, D}, {}, gen).to(dt).to(dev).requires_grad_();
      const double flops = 4.0 * B * H * static_cast<double>(T) * static_cast<double>(T) * D * 0.5;
      double fwd = 0;
      {
        NoGradGuard ng;
        fwd = best_seconds([&] { flash_attention(q, k, v, {.causal = true}); }, dev, reps);
      }
      const double both = best_seconds(
          [&] {
            Tensor out = flash_attention(q, k, v, {.causal = true});
            out.sum().backward();
          },
          dev, reps);
      const double bwd = std::max(both - fwd, fwd);
      const double peak = d.gemm.peak_flops.at("fp32");
      d.flash_forward_efficiency = std::min(1.0, flops / fwd / peak);
      d.flash_backward_efficiency = std::min(1.0, 2.5 * flops / bwd / peak);
      say(fmt::format("flash attention f32 B{} T{} H{} D{}: forward {:.2f} GFLOP/s ({:.0f}% of the GEMM peak), "
                      "backward {:.2f} GFLOP/s ({:.0f}%)",
                      B, T, H, D, flops / fwd / 1e9, 100 * d.flash_forward_efficiency, 2.5 * flops / bwd / 1e9,
                      100 * d.flash_backward_efficiency));
    }
  }

  // ---- memory and the host
  if (dev.is_cpu()) {
    d.memory_gb = host_memory_gb();
    d.cpu_cores = cores;
    d.threads_per_rank = threads;
    // Ranks are forked only with one thread each (a forked child has no
    // thread pool); with more the sharing is not measured.
    const int ranks = cores / threads;
    const bool forks = threads == 1 && o.measure_links;
    const double eff = ranks >= 2 && forks ? measure_sharing(ranks, cores, o.quick, gen, say) : 0;
    d.shared_efficiency = eff > 0 ? eff : 1.0;
    if (eff <= 0)
      say(ranks < 2 ? "ranks sharing the host: one rank fills it (not measured)"
                    : "ranks sharing the host: not measured (needs --threads 1); taken as no slowdown");
    // Twice as many ranks as cores (qk run --nproc-per-node beyond the
    // cores); not on big hosts, where nobody runs so and 2 x cores forks of
    // ~30 MB each would be many gigabytes.
    const bool small_host = cores <= 64;
    const double over = forks && small_host ? measure_sharing(2 * cores, cores, o.quick, gen, say) : 0;
    d.oversubscribed_efficiency = over > 0 ? over : 1.0;
    if (over <= 0)
      say(fmt::format("more ranks than cores: not measured ({}); taken as fair time slicing",
                      small_host ? "needs --threads 1" : "a host of more than 64 cores"));
  } else {
    d.memory_gb = 80;
    say("device memory: not measured (the backend does not report its size); set device.memory_gb in the file");
  }
  d.memory_reserved_gb = 0;
  c.gpus_per_node = o.ranks_per_node > 0 ? o.ranks_per_node : (dev.is_cpu() ? 64 : 8);

  // ---- links: qccl between two ranks here; the network is qccl's static tcp figure
  c.intra = {dev.is_cpu() ? "shm" : "pcie", 5.0, 5.0, 1.0};
  if (!o.measure_links || !measure_link(c.intra, say))
    say("qccl link: not measured; shared memory taken as 5 GB/s and 5 us");
  c.network.nic = {"tcp", 2.0, 30.0, 1.0};
  c.network.nics_per_node = 1;
  c.sources["device"] = c.calibrated;
  c.sources["intra"] = "qccl all-reduce between two forked ranks of this host (qk sim calibrate)";
  c.sources["network"] = "not measured: qccl's static tcp figures (30 us, 2 GB/s)";
  return c;
}

}  // namespace qk::sim
