// `qk sim`: a training step of `qk pretrain-gpt`'s model and layout on a
// cluster, simulated (docs/sim.md); `qk sim --search` ranks every layout
// that fits; `qk sim calibrate` measures this machine (the cluster `local`).
//
//   qk sim --world-size 1024 --cluster h100-sxm-ib400 --num-layers 80 --hidden-size 8192 ...
//          --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --micro-batch-size 1
//          --global-batch-size 1024 --seq-length 4096 --max-position-embeddings 4096 --bf16 ...
//   qk sim ... --search [--search-vary tp,pp,mbs] [--top 10] [--json]
//   qk sim ... --trace step.json                   # Chrome / Perfetto trace of the simulated step
//   qk sim ... --node-mtbf-hours 2000 --checkpoint-write-s 60 --restart-s 600
//   qk sim --list-clusters
//   qk sim calibrate [--device cpu|cuda] [--output FILE]
//
// The model and layout flags are Megatron's, read by the parser `qk
// pretrain-gpt` uses (qk::recipes::parse_megatron_args); the rest are qk's.
#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include "command.h"
#include "qk/base/error.h"
#include "qk/base/file_io.h"
#include "qk/parallel/timeline.h"
#include "qk/recipes/megatron_args.h"
#include "qk/sim/sim.h"

namespace qk::cli {
namespace {

constexpr const char* kSimOwnFlags =
    "qk sim: a training step of `qk pretrain-gpt`'s model and layout on a cluster, simulated.\n\n"
    "qk's own flags (the others are Megatron-LM's, as `qk pretrain-gpt` takes them):\n"
    "  --world-size N           GPUs (ranks) of the run; the data-parallel size is derived as Megatron derives it\n"
    "  --cluster NAME|FILE      a preset (--list-clusters) or a cluster file (docs/sim.md)\n"
    "  --list-clusters          the presets, with where their figures come from\n"
    "  --search                 every layout of --world-size that fits, ranked by throughput\n"
    "  --search-vary LIST       what the search varies: tp,pp,vp,ep,mbs,recompute,dist-opt (default: all)\n"
    "  --top N                  layouts the search prints (default 10)\n"
    "  --keep-unfit             the search also lists layouts that do not fit\n"
    "  --json                   one JSON object per layout (step_time_s, tokens_per_s, tflops_per_gpu, mfu,\n"
    "                           mem_gb_per_gpu, fits, layout, memory and time breakdowns)\n"
    "  --trace FILE             the simulated step as a Chrome / Perfetto trace (one row per pipeline stage)\n"
    "  --moe-imbalance X        routed tokens on the busiest expert-parallel rank over the mean (default 1)\n"
    "  --node-mtbf-hours H      with --checkpoint-write-s S and --restart-s R: goodput under failures and the\n"
    "                           checkpoint interval that maximises it (Young/Daly)\n"
    "qk sim calibrate [--device cpu|cuda] [--output FILE] [--threads N]: measure this machine (the cluster\n"
    "  `local`; default output: QK_SIM_CALIBRATION or ~/.cache/qianka/sim-local.json)\n\n";

// Takes `--name VALUE` (or --name=VALUE) out of argv.
std::optional<std::string> take_value(std::vector<std::string>& argv, const std::string& name) {
  std::optional<std::string> v;
  for (size_t i = 0; i < argv.size();) {
    if (argv[i] == name) {
      QK_CHECK(i + 1 < argv.size(), name, " needs a value");
      v = argv[i + 1];
      argv.erase(argv.begin() + static_cast<std::ptrdiff_t>(i), argv.begin() + static_cast<std::ptrdiff_t>(i) + 2);
    } else if (argv[i].rfind(name + "=", 0) == 0) {
      v = argv[i].substr(name.size() + 1);
      argv.erase(argv.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return v;
}

bool take_switch(std::vector<std::string>& argv, const std::string& name) {
  const auto n = std::erase(argv, name);
  return n > 0;
}

// A flag's value as T (int64_t or double), the whole string or an error naming the flag.
template <typename T>
T to_number(const std::string& flag, const std::string& v) {
  size_t used = 0;
  T x = 0;
  try {
    if constexpr (std::is_integral_v<T>)
      x = std::stoll(v, &used);
    else
      x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  QK_CHECK(used == v.size() && !v.empty(), flag, ": expected ", std::is_integral_v<T> ? "an integer" : "a number",
           ", got '", v, "'");
  return x;
}
int64_t to_int(const std::string& flag, const std::string& v) { return to_number<int64_t>(flag, v); }
double to_double(const std::string& flag, const std::string& v) { return to_number<double>(flag, v); }

void run_calibrate(std::vector<std::string> argv) {
  sim::CalibrateOptions o;
  if (auto d = take_value(argv, "--device")) o.device = *d;
  if (auto t = take_value(argv, "--threads")) o.threads = static_cast<int>(to_int("--threads", *t));
  const std::string out = take_value(argv, "--output").value_or(sim::calibration_path());
  o.quick = take_switch(argv, "--quick");
  QK_CHECK(argv.empty(), "qk sim calibrate: unknown argument '", argv.empty() ? "" : argv.front(),
           "' (--device, --threads, --output, --quick)");
  const sim::Cluster c = sim::calibrate(o, [](const std::string& line) { fmt::print("{}\n", line); });
  const std::string::size_type slash = out.rfind('/');
  if (slash != std::string::npos && slash > 0) make_dirs(out.substr(0, slash));
  atomic_write_file(out, sim::cluster_to_json(c));
  fmt::print("wrote {} (the cluster `local`)\n", out);
}

void list_clusters() {
  for (const auto& p : sim::cluster_presets()) {
    fmt::print("{:<18} {}\n", p.name, p.description);
    if (p.name == "local") continue;
    for (const auto& [field, source] : sim::load_cluster(p.name).sources)
      fmt::print("{:<18}   {}: {}\n", "", field, source);
  }
}

void print_reliability(const sim::ReliabilityInput& in, bool json) {
  const sim::Reliability r = sim::reliability(in);
  if (json) {
    fmt::print("{{\"reliability\": {{\"system_mtbf_s\": {}, \"failures_per_day\": {}, \"checkpoint_interval_s\": {}, "
               "\"goodput\": {}}}}}\n",
               r.system_mtbf_s, r.failures_per_day, r.checkpoint_interval_s, r.goodput);
    return;
  }
  fmt::print("reliability {} GPUs: system MTBF {:.2f} h ({:.1f} failures a day); checkpoint every {:.2f} h of work "
             "(Young/Daly); goodput {:.1f}%\n",
             in.devices, r.system_mtbf_s / 3600, r.failures_per_day, r.checkpoint_interval_s / 3600,
             100 * r.goodput);
}

void run_sim(std::vector<std::string> argv) {
  if (!argv.empty() && argv.front() == "calibrate") {
    argv.erase(argv.begin());
    run_calibrate(std::move(argv));
    return;
  }
  if (take_switch(argv, "--list-clusters")) {
    list_clusters();
    return;
  }
  if (take_switch(argv, "--help") || take_switch(argv, "-h")) {
    std::fputs(kSimOwnFlags, stdout);
    std::fputs(recipes::megatron_help("qk sim").c_str(), stdout);
    return;
  }
  const auto world = take_value(argv, "--world-size");
  const auto cluster_name = take_value(argv, "--cluster");
  const bool search = take_switch(argv, "--search");
  const auto vary = take_value(argv, "--search-vary");
  const auto top = take_value(argv, "--top");
  const bool keep_unfit = take_switch(argv, "--keep-unfit");
  const bool json = take_switch(argv, "--json");
  const auto trace = take_value(argv, "--trace");
  const auto imbalance = take_value(argv, "--moe-imbalance");
  const auto mtbf = take_value(argv, "--node-mtbf-hours");
  const auto ckpt = take_value(argv, "--checkpoint-write-s");
  const auto restart = take_value(argv, "--restart-s");
  QK_CHECK(world.has_value(), "qk sim needs --world-size N (the GPUs of the run); qk sim --help lists the flags");
  QK_CHECK(cluster_name.has_value(), "qk sim needs --cluster NAME|FILE; the presets: qk sim --list-clusters");
  const int64_t n = to_int("--world-size", *world);
  QK_CHECK(n >= 1, "--world-size must be >= 1, got ", n);
  const sim::Cluster cluster = sim::load_cluster(*cluster_name);
  const recipes::ParsedMegatronArgs p = recipes::parse_megatron_args(argv, sim::megatron_options(n));
  if (!json)
    for (const auto& note : p.notes) fmt::print("note: {}\n", note);

  sim::SimOptions so;
  if (imbalance) so.moe_imbalance = to_double("--moe-imbalance", *imbalance);
  so.timelines = trace.has_value();

  if (search) {
    sim::SearchOptions o;
    o.sim = so;
    o.keep_unfit = keep_unfit;
    if (top) o.top = static_cast<size_t>(std::max<int64_t>(1, to_int("--top", *top)));
    if (vary) {
      o.vary.clear();
      std::stringstream ss(*vary);
      for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) o.vary.insert(item);
    }
    const sim::SearchResult r = sim::search_layouts(p.args, cluster, o);
    if (json) {
      for (const auto& x : r.ranked) fmt::print("{}\n", sim::result_json(x));
    } else {
      fmt::print("searched {} layouts of {} GPUs on {} in {:.2f} s: {} fit, {} refused by the flags' rules\n",
                 r.evaluated, n, cluster.name, r.seconds, r.fitting, r.rejected);
      fmt::print("{:>4} {:>12} {:>9} {:>7} {:>6} {:>8}  {}\n", "rank", "tokens/s", "step s", "TFLOP/s", "MFU",
                 "mem GB", "layout");
      for (size_t i = 0; i < r.ranked.size(); ++i) {
        const auto& x = r.ranked[i];
        fmt::print("{:>4} {:>12.0f} {:>9.3f} {:>7.1f} {:>5.1f}% {:>8.1f}  {}{}\n", i + 1, x.tokens_per_s,
                   x.step_time_s, x.tflops_per_gpu, 100 * x.mfu, x.mem_gb_per_gpu, x.layout.describe(),
                   x.fits ? "" : " (" + x.fit_note + ")");
      }
      if (!r.ranked.empty()) fmt::print("best: {}\n", sim::layout_flags(r.ranked.front().layout));
    }
  } else {
    const sim::SimResult r = sim::simulate(p.args, cluster, so);
    if (json)
      fmt::print("{}\n", sim::result_json(r));
    else
      fmt::print("cluster     {} ({} GPUs, {} per node)\n{}", cluster.name, n, cluster.gpus_per_node,
                 sim::result_text(r));
    if (trace) {
      parallel::write_chrome_trace(*trace, r.timelines);
      if (!json) fmt::print("trace       {}\n", *trace);
    }
  }
  if (mtbf) {
    sim::ReliabilityInput in;
    in.devices = n;
    in.devices_per_node = cluster.gpus_per_node;
    in.node_mtbf_hours = to_double("--node-mtbf-hours", *mtbf);
    in.checkpoint_write_s = ckpt ? to_double("--checkpoint-write-s", *ckpt) : 0;
    in.restart_s = restart ? to_double("--restart-s", *restart) : 0;
    print_reliability(in, json);
  } else {
    QK_CHECK(!ckpt && !restart, "--checkpoint-write-s and --restart-s go with --node-mtbf-hours");
  }
}

void setup_sim(CLI::App& app) {
  // Megatron's flags and qk's own: CLI11 only hands them over.
  app.set_help_flag();
  app.allow_extras();
  app.prefix_command();
  app.footer("Run 'qk sim --help' for qk's flags and every Megatron flag.");
  app.callback([&app] { run_sim(app.remaining()); });
}

}  // namespace

QK_REGISTER_COMMAND(sim, "Simulate a training step on a cluster: time, throughput, MFU, memory; --search layouts",
                    setup_sim);

}  // namespace qk::cli
