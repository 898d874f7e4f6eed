// `qk pretrain-gpt`: Megatron-LM's pretrain_gpt.py with its own arguments.
//
//   qk pretrain-gpt --num-layers 6 --hidden-size 512 --num-attention-heads 8 --seq-length 256
//       --micro-batch-size 4 --global-batch-size 8 --train-iters 100 --lr 3e-4
//       --tokenizer-type HuggingFaceTokenizer --tokenizer-model tok.json
//       --data-path 1.0 data/docs_text_document --split 949,50,1 --save ckpt --load ckpt
//   qk run --nproc-per-node 2 -- qk pretrain-gpt ...      # data-parallel
//   qk pretrain-gpt --device cuda ...                     # on the GPU (qk's flag, not Megatron's)
//   qk pretrain-gpt --help                                # every flag, grouped as arguments.py
//
// The arguments go to qk::recipes::parse_megatron_args as they are (an unknown
// flag names the closest known one; a flag whose feature is not built says
// so); the run is qk::recipes::pretrain_gpt (qk/recipes/gpt_pretrain.h).
#include <cstdio>

#include "command.h"
#include "qk/base/error.h"
#include "qk/dist/launch_env.h"
#include "qk/recipes/gpt_pretrain.h"
#include "qk/recipes/megatron_args.h"

namespace qk::cli {
namespace {

constexpr const char* kPretrainOwnFlags =
    "qk's own flags (Megatron-LM has none by these names; it always runs on the GPU):\n"
    "  --device DEVICE       cpu (default), cuda (the local rank's GPU under qk run) or cuda:N: where the\n"
    "                        model, gradients, optimizer state and batches live; every parallel\n"
    "                        layout runs there (routing and permutation indices are computed on\n"
    "                        the host). Trains on an H200, correct but slower than PyTorch there\n"
    "                        for now (docs/cuda.md)\n\n";

// Takes qk's own flags out of argv (the rest is Megatron's).
std::string take_device_flag(std::vector<std::string>& argv) {
  std::string device = "cpu";
  for (size_t i = 0; i < argv.size();) {
    if (argv[i] == "--device") {
      QK_CHECK_AS(ValueError, i + 1 < argv.size() && argv[i + 1].rfind("--", 0) != 0,
                  "--device needs a value: cpu, cuda or cuda:N");
      device = argv[i + 1];
      argv.erase(argv.begin() + static_cast<std::ptrdiff_t>(i), argv.begin() + static_cast<std::ptrdiff_t>(i) + 2);
    } else if (argv[i].rfind("--device=", 0) == 0) {
      device = argv[i].substr(9);
      argv.erase(argv.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return device;
}

void run_pretrain_gpt(std::vector<std::string> argv) {
  const dist::LaunchEnv env = dist::launch_env();
  const std::string device = take_device_flag(argv);
  recipes::MegatronArgsOptions o;
  o.world_size = env.world_size;
  o.rank = env.rank;
  const recipes::ParsedMegatronArgs p = recipes::parse_megatron_args(argv, o);
  if (p.help) {
    std::fputs(kPretrainOwnFlags, stdout);
    std::fputs(recipes::megatron_help("qk pretrain-gpt").c_str(), stdout);
    return;
  }
  recipes::PretrainGptOptions run;
  run.notes = p.notes;
  run.device = device;  // checked by pretrain_gpt before anything is read or written
  recipes::pretrain_gpt(p.args, run);
}

void setup_pretrain_gpt(CLI::App& app) {
  // Every argument is Megatron's: CLI11 only hands them over.
  app.set_help_flag();
  app.allow_extras();
  app.prefix_command();
  app.footer("Megatron-LM's pretrain_gpt.py arguments; run 'qk pretrain-gpt --help' for all of them.");
  app.callback([&app] { run_pretrain_gpt(app.remaining()); });
}

}  // namespace

// QK_REGISTER_COMMAND spells the name as an identifier; this one has a dash.
static Registrar qk_cli_registrar_pretrain_gpt("pretrain-gpt",
                                               "Pre-train a GPT/Llama model with Megatron-LM's arguments",
                                               setup_pretrain_gpt);

}  // namespace qk::cli
