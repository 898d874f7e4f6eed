// DDP's reducer: buckets, gradient-ready hooks, in-order launches, and the
// end-of-backward callback that waits and copies the averages back.
#include "qk/dist/ddp.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "qk/tensor/ops/view.h"

namespace qk::dist {

namespace {

// FNV-1a over the bytes of a string: a stable structural fingerprint.
uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

int64_t bytes_of(const Tensor& t) { return t.numel() * static_cast<int64_t>(dtype_size(t.dtype())); }

}  // namespace

struct DistributedDataParallel::Reducer {
  struct Bucket {
    std::vector<size_t> params;   // indices into Reducer::params
    std::vector<int64_t> offset;  // element offset of each in `buffer`
    Tensor buffer;                // flat, the parameters' dtype
    Tensor wire;                  // what is all-reduced: buffer, or its compressed copy
    int pending = 0;
    bool launched = false;
    WorkPtr work;
  };

  ProcessGroup& pg;
  DDPOptions opts;
  const bool* sync;
  std::vector<Tensor> params;
  std::vector<Bucket> buckets;
  std::vector<std::pair<size_t, size_t>> where;  // param -> (bucket, slot)
  std::vector<char> ready;
  size_t next_launch = 0;
  bool armed = false;
  DDPStepStats stats, last;

  Reducer(ProcessGroup& g, DDPOptions o, const bool* s) : pg(g), opts(o), sync(s) {}

  Tensor slot(size_t p) {
    auto [b, k] = where[p];
    const Tensor& t = params[p];
    return ops::reshape(ops::narrow(buckets[b].buffer, 0, buckets[b].offset[k], t.numel()),
                        t.shape());
  }

  // New step: every bucket waits for all its gradients again.
  void arm() {
    armed = true;
    stats = {};
    stats.buckets = static_cast<int>(buckets.size());
    next_launch = 0;
    std::fill(ready.begin(), ready.end(), 0);
    for (auto& b : buckets) {
      b.pending = static_cast<int>(b.params.size());
      b.launched = false;
      b.work.reset();
    }
  }

  void launch(Bucket& b, bool in_backward) {
    if (b.wire.dtype() != b.buffer.dtype()) b.wire.copy_(b.buffer);
    if (stats.first_launch == DDPStepStats::Clock::time_point{})
      stats.first_launch = DDPStepStats::Clock::now();
    if (in_backward) ++stats.buckets_launched_in_backward;
    stats.wire_bytes += bytes_of(b.wire);
    b.work = pg.all_reduce_async(b.wire, ReduceOp::avg);
    b.launched = true;
  }

  // Launches the ready buckets that follow the last launched one, in order.
  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0)
      launch(buckets[next_launch++], /*in_backward=*/true);
  }

  void on_grad_ready(size_t p, const std::weak_ptr<Reducer>& self) {
    if (!*sync) return;
    if (!armed) {
      arm();
      autograd::queue_callback([self] {
        if (auto r = self.lock()) r->finish();
      });
    }
    if (ready[p]) return;
    ready[p] = 1;
    slot(p).copy_(params[p].grad());
    if (--buckets[where[p].first].pending == 0) launch_ready();
  }

  // End of backward: launch what is left (a parameter that got no gradient
  // this step counts as zero), wait for all, copy the averages back.
  void finish() {
    NoGradGuard no_grad;
    armed = false;
    stats.backward_end = DDPStepStats::Clock::now();
    for (size_t p = 0; p < params.size(); ++p)
      if (!ready[p]) slot(p).zero_();
    while (next_launch < buckets.size()) launch(buckets[next_launch++], /*in_backward=*/false);
    auto t0 = DDPStepStats::Clock::now();
    for (auto& b : buckets) b.work->wait();
    stats.wait_ms =
        std::chrono::duration<double, std::milli>(DDPStepStats::Clock::now() - t0).count();
    for (auto& b : buckets)
      if (b.wire.dtype() != b.buffer.dtype()) b.buffer.copy_(b.wire);
    for (size_t p = 0; p < params.size(); ++p) {
      Tensor avg = slot(p);
      Tensor g = params[p].grad();  // a handle: copy_ writes the parameter's .grad
      if (g.defined() && g.shape() == avg.shape() && g.dtype() == avg.dtype()) {
        g.copy_(avg);
      } else {
        params[p].set_grad(ops::clone(avg));
      }
    }
    last = stats;
  }
};

void check_same_model(const nn::Module& m, ProcessGroup& pg) {
  uint64_t h = fnv1a("qk-ddp-model");
  int64_t count = 0, numel = 0;
  auto add = [&](const std::string& kind, const nn::NamedTensors& ts) {
    for (const auto& item : ts) {
      const Tensor& t = item.value();
      h = fnv1a(kind + ":" + item.key() + ":" + shape_str(t.shape()) + ":" +
                    dtype_name(t.dtype()) + ";",
                h);
      ++count;
      numel += t.numel();
    }
  };
  add("param", m.named_parameters());
  add("buffer", m.named_buffers());
  const int w = pg.size();
  Tensor mine = from_vector<int64_t>({static_cast<int64_t>(h), count, numel}, {3});
  Tensor all = empty({3 * w}, DType::i64);
  pg.all_gather(all, mine);
  const int64_t* a = all.data_ptr<int64_t>();
  std::vector<int> differ;
  for (int r = 1; r < w; ++r)
    if (a[3 * r] != a[0]) differ.push_back(r);
  if (differ.empty()) return;
  std::string msg;
  for (int r : differ)
    msg += fmt::format("{}rank {} ({} tensors, {} elements)", msg.empty() ? "" : ", ", r,
                       a[3 * r + 1], a[3 * r + 2]);
  QK_THROW(ValueError, "DistributedDataParallel: the model differs across ranks: rank 0 has ", a[1],
           " parameter/buffer tensors with ", a[2], " elements; ", msg,
           " differ in names, shapes or dtypes. Every rank must build the same model.");
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 ProcessGroup& pg, DDPOptions opts)
    : module_(std::move(module)), pg_(pg), opts_(opts) {
  QK_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  QK_CHECK(opts.bucket_cap_mb > 0 && opts.first_bucket_mb > 0,
           "DistributedDataParallel: bucket_cap_mb and first_bucket_mb must be positive, got ",
           opts.bucket_cap_mb, " and ", opts.first_bucket_mb);
  QK_CHECK(!opts.compress || *opts.compress == DType::bf16 || *opts.compress == DType::f16,
           "DistributedDataParallel: compress must be bf16 or f16, got ",
           dtype_name(*opts.compress));
  check_same_model(*module_, pg_);

  // Rank 0's parameters and buffers everywhere.
  {
    NoGradGuard no_grad;
    std::vector<WorkPtr> works;
    for (const Tensor& t : module_->parameters()) works.push_back(pg_.broadcast_async(t, 0));
    for (const Tensor& t : module_->buffers()) works.push_back(pg_.broadcast_async(t, 0));
    for (auto& w : works) w->wait();
    for (const Tensor& t : module_->parameters()) t.bump_version();
  }

  reducer_ = std::make_shared<Reducer>(pg_, opts_, &sync_);
  Reducer& r = *reducer_;
  for (const Tensor& p : module_->parameters())
    if (p.requires_grad()) r.params.push_back(p);
  // One device per model, as torch's DDP with one device per process: the
  // buckets live there and travel as the process group routes that device.
  const Device dev = r.params.empty() ? kCPU : r.params.front().device();
  for (const Tensor& p : r.params)
    QK_CHECK_DEVICE(p.device() == dev, "DistributedDataParallel: the model's parameters are on ", dev.str(),
                    " and ", p.device().str(), "; move the whole model to one device (Module::to) first");
  r.where.resize(r.params.size());
  r.ready.assign(r.params.size(), 0);

  // Buckets in reverse parameter order, one dtype per bucket.
  const int64_t first_cap = static_cast<int64_t>(opts.first_bucket_mb * 1024 * 1024);
  const int64_t cap = static_cast<int64_t>(opts.bucket_cap_mb * 1024 * 1024);
  std::map<DType, size_t> open;  // dtype -> the bucket being filled
  std::map<DType, int64_t> filled;
  for (size_t i = r.params.size(); i-- > 0;) {
    const Tensor& p = r.params[i];
    const DType dt = p.dtype();
    auto it = open.find(dt);
    if (it != open.end()) {
      const int64_t limit = it->second == 0 ? first_cap : cap;
      // A parameter larger than the cap gets a bucket of its own.
      if (filled[dt] > 0 && filled[dt] + bytes_of(p) > limit) it = open.end();
    }
    if (it == open.end()) {
      r.buckets.emplace_back();
      it = open.insert_or_assign(dt, r.buckets.size() - 1).first;
      filled[dt] = 0;
    }
    auto& bucket = r.buckets[it->second];
    const int64_t off =
        bucket.params.empty() ? 0 : bucket.offset.back() + r.params[bucket.params.back()].numel();
    r.where[i] = {it->second, bucket.params.size()};
    bucket.params.push_back(i);
    bucket.offset.push_back(off);
    filled[dt] += bytes_of(p);
  }
  for (auto& b : r.buckets) {
    int64_t n = b.offset.back() + r.params[b.params.back()].numel();
    DType dt = r.params[b.params.front()].dtype();
    // What goes on the wire lives in qcclMemAlloc memory: ranks on one host
    // then reduce it directly between their buffers (algo/direct.h).
    bool compressed = opts.compress && *opts.compress != dt && is_floating(dt);
    // (On a device: device memory, which qccl carries itself or stages.)
    auto wire_zeros = [&](DType t) {
      return dev.is_cpu() ? pg_.shared_zeros(n, t) : zeros({n}, TensorOptions(t).device(dev));
    };
    b.buffer = compressed ? zeros({n}, TensorOptions(dt).device(dev)) : wire_zeros(dt);
    b.wire = compressed ? wire_zeros(*opts.compress) : b.buffer;
  }

  std::weak_ptr<Reducer> weak = reducer_;
  for (size_t i = 0; i < r.params.size(); ++i) {
    r.params[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto red = weak.lock()) red->on_grad_ready(i, weak);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::prepare_forward() {
  if (!opts_.broadcast_buffers || pg_.size() == 1) return;
  std::vector<WorkPtr> works;
  for (const Tensor& t : module_->buffers()) works.push_back(pg_.broadcast_async(t, 0));
  for (auto& w : works) w->wait();
  for (const Tensor& t : module_->buffers()) t.bump_version();
}

size_t DistributedDataParallel::num_buckets() const { return reducer_->buckets.size(); }

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : reducer_->buckets) out.push_back(b.params);
  return out;
}

const DDPStepStats& DistributedDataParallel::last_step() const { return reducer_->last; }

}  // namespace qk::dist
