// Pipeline-parallel GPT training steps: the measured bubble against theory,
// tokens/s and peak memory per stage. The program
// forks one process per stage (a store in the parent, as `qk run`), each
// computing on --threads threads, and prints one JSON line from stage 0.
//
//   gpt_pipeline --pp 2 --micro-batches 8 [--vp 2] [--overlap 1] [--layers 8 --hidden 256 --heads 8 --seq 128
//                --micro-batch-size 2 --vocab 512 --steps 3 --warmup 1 --threads 1] [--trace trace.json]
//
// Bubble: each stage's idle time (no forward, backward) inside the step's
// schedule window common to all stages (first start to last end), over
// that window, averaged over the measured steps; theory (p-1)/(v m+p-1).
// Step time (for tokens/s) includes the embedding all-reduce and AdamW.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "qk/base/thread_pool.h"
#include "qk/base/timer.h"
#include "qk/dist/process_group.h"
#include "qk/optim/adam.h"
#include "qk/parallel/parallel_state.h"
#include "qk/parallel/pipeline_schedule.h"
#include "qk/qccl/store.h"
#include "qk/tensor/backend.h"
#include "qk/transformer/gpt_pipeline.h"

namespace {

struct Options {
  int pp = 2, vp = 1, steps = 3, warmup = 1, threads = 1;
  int64_t microbatches = 8, layers = 8, hidden = 256, heads = 8, seq = 128, micro_batch = 2, vocab = 512;
  bool overlap = false;
  std::string trace;
};

std::string join(const std::vector<double>& v, const char* fmt_spec) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + fmt::format(fmt::runtime(fmt_spec), v[i]);
  return s + "]";
}

int run_stage(const Options& o) {
  using namespace qk;
  dist::init();
  parallel::ParallelSizes sizes;
  sizes.pipeline_model_parallel_size = o.pp;
  auto ps = parallel::ParallelState::create(dist::group(), sizes);
  auto& pp = *ps->group(parallel::GroupKind::pp);

  transformer::TransformerConfig c;
  c.num_layers = o.layers;
  c.hidden_size = o.hidden;
  c.num_attention_heads = o.heads;
  c.seq_length = o.seq;
  c.vocab_size = o.vocab;
  c.hidden_dropout = c.attention_dropout = 0.0;
  c.activation_func = transformer::Activation::openai_gelu;
  parallel::PipelineSplitOptions so;
  so.num_layers = o.layers;
  so.pipeline_model_parallel_size = o.pp;
  so.num_virtual_stages_per_pipeline_rank = o.vp > 1 ? o.vp : 0;
  const auto split = parallel::PipelineLayerSplit::make(so);
  manual_seed(0);
  auto chunks = transformer::build_gpt_model_chunks(c, split, pp.rank());
  std::vector<Tensor> params;
  for (auto& ch : chunks)
    for (const auto& p : ch->parameters()) params.push_back(p);
  optim::AdamW opt(params, optim::AdamWOptions(3e-4).weight_decay(0.1));

  std::vector<Tensor> tokens, labels;
  for (int64_t j = 0; j < o.microbatches; ++j) {
    tokens.push_back(randint(0, o.vocab, {o.micro_batch, o.seq}));
    labels.push_back(randint(0, o.vocab, {o.micro_batch, o.seq}));
  }
  parallel::PipelineSchedule schedule(pp);
  parallel::PipelineScheduleOptions so2;
  so2.num_microbatches = o.microbatches;
  so2.tensor_shape = {o.micro_batch, o.seq, o.hidden};
  so2.num_model_chunks = o.vp;
  so2.overlap_p2p_comm = o.overlap;
  parallel::Timeline tl(pp.rank(), fmt::format("pp stage {}", pp.rank()));
  so2.timeline = &tl;
  auto forward_step = [&](int chunk, int64_t j, const Tensor& input) {
    auto& ch = chunks[static_cast<size_t>(chunk)];
    transformer::GPTChunkInput in;
    if (ch->pre_process()) in.tokens = tokens[static_cast<size_t>(j)];
    else in.hidden = input;
    if (ch->post_process()) in.labels = labels[static_cast<size_t>(j)];
    return parallel::ForwardStepResult{ch->forward(in), {}};
  };

  double bubble = 0, step_s = 0, loss = 0;
  for (int it = 0; it < o.warmup + o.steps; ++it) {
    if (it == o.warmup) reset_peak_memory(kCPU);
    dist::group().barrier();
    Timer t;
    opt.zero_grad();
    tl.begin_step();
    const auto r = schedule.run(forward_step, so2);
    tl.end_step();
    transformer::all_reduce_embedding_grads(chunks, ps->group(parallel::GroupKind::embedding).get());
    {
      parallel::SpanScope s(&tl, parallel::SpanKind::optimizer, "optimizer");
      opt.step();
    }
    Tensor elapsed = from_vector<double>({t.seconds()}, {1});
    pp.all_reduce(elapsed, dist::ReduceOp::max);
    const auto window = parallel::common_window(tl, pp);
    const double mine = parallel::measure_bubble(tl, window).fraction;
    Tensor mean = from_vector<double>({mine}, {1});
    pp.all_reduce(mean, dist::ReduceOp::avg);
    if (it >= o.warmup) {
      bubble += mean.data_ptr<double>()[0] / o.steps;
      step_s += elapsed.data_ptr<double>()[0] / o.steps;
    }
    const auto m = parallel::broadcast_from_last_stage(r.metrics, pp);
    loss = m.at("loss").sum / m.at("loss").count;
  }
  // Per stage: its own measured bubble over the last step's common window, peak memory.
  const double last_bubble = parallel::measure_bubble(tl, parallel::common_window(tl, pp)).fraction;
  Tensor mine = from_vector<double>({last_bubble, peak_rss_bytes() / 1048576.0,
                                     memory_stats(kCPU).peak_allocated / 1048576.0}, {3});
  Tensor all = empty({3 * o.pp}, TensorOptions(DType::f64));
  pp.all_gather(all, mine);
  const auto timelines = parallel::gather_timelines(tl, pp);
  if (pp.rank() == 0) {
    std::vector<double> stage_bubble, rss, tensors;
    for (int r = 0; r < o.pp; ++r) {
      stage_bubble.push_back(all.data_ptr<double>()[3 * r]);
      rss.push_back(all.data_ptr<double>()[3 * r + 1]);
      tensors.push_back(all.data_ptr<double>()[3 * r + 2]);
    }
    const double theory = parallel::theoretical_bubble_fraction(o.pp, o.microbatches, o.vp);
    fmt::print("{{\"pp\": {}, \"vp\": {}, \"microbatches\": {}, \"overlap\": {}, \"threads_per_stage\": {}, "
               "\"layers\": {}, \"hidden\": {}, \"seq\": {}, \"micro_batch\": {}, \"bubble_theory\": {:.3f}, "
               "\"bubble_measured\": {:.3f}, \"bubble_last_step_per_stage\": {}, \"ms_per_step\": {:.0f}, "
               "\"tokens_per_s\": {:.0f}, \"peak_rss_mb_per_stage\": {}, \"peak_tensor_mb_per_stage\": {}, "
               "\"loss\": {:.4f}}}\n",
               o.pp, o.vp, o.microbatches, o.overlap, o.threads, o.layers, o.hidden, o.seq, o.micro_batch, theory,
               bubble, join(stage_bubble, "{:.3f}"), 1e3 * step_s,
               static_cast<double>(o.microbatches * o.micro_batch * o.seq) / step_s, join(rss, "{:.0f}"),
               join(tensors, "{:.0f}"), loss);
    if (!o.trace.empty()) parallel::write_chrome_trace(o.trace, timelines);
  }
  dist::destroy();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--pp") o.pp = std::atoi(v);
    else if (k == "--vp") o.vp = std::atoi(v);
    else if (k == "--micro-batches") o.microbatches = std::atoll(v);
    else if (k == "--layers") o.layers = std::atoll(v);
    else if (k == "--hidden") o.hidden = std::atoll(v);
    else if (k == "--heads") o.heads = std::atoll(v);
    else if (k == "--seq") o.seq = std::atoll(v);
    else if (k == "--micro-batch-size") o.micro_batch = std::atoll(v);
    else if (k == "--vocab") o.vocab = std::atoll(v);
    else if (k == "--steps") o.steps = std::atoi(v);
    else if (k == "--warmup") o.warmup = std::atoi(v);
    else if (k == "--threads") o.threads = std::atoi(v);
    else if (k == "--overlap") o.overlap = std::atoi(v) != 0;
    else if (k == "--trace") o.trace = v;
    else {
      fmt::print(stderr, "unknown flag {}\n", k);
      return 2;
    }
  }
  // The parent only hosts the store and waits: it computes nothing, so the
  // forked stages start with no thread pool of its making.
  qk::qccl::StoreServer server(0, "gpt-pipeline-bench");
  const int port = server.port();
  std::vector<pid_t> pids;
  for (int r = 0; r < o.pp; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(o.pp).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("QK_STORE_TOKEN", "gpt-pipeline-bench", 1);
      ::setenv("QK_RUN", "1", 1);
      ::setenv("QK_NUM_THREADS", std::to_string(o.threads).c_str(), 1);
      int code = 1;
      try {
        code = run_stage(o);
      } catch (const std::exception& e) {
        fmt::print(stderr, "stage {}: {}\n", r, e.what());
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed ? 1 : 0;
}
