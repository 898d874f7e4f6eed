// Megatron-LM arguments: argparse conventions, unknown-flag suggestions, bad values,
// defaults equal to Megatron's, the flag table's integrity, --help and the dump.
#include "qk/recipes/megatron_args.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "megatron_args_test_util.h"
#include "megatron_flag_table.h"

namespace qk::test {
namespace {

using recipes::parse_megatron_flags;

std::string flags_error(const Argv& argv) {
  return error_of([&] { parse_megatron_flags(argv); });
}

TEST(MegatronArgsParse, ValueForms) {
  const auto p = parse_megatron_flags({"--num-layers=6", "--hidden-size", "512", "--normalization=RMSNorm",
                                       "--swiglu", "--disable-bias-linear", "--no-position-embedding"});
  EXPECT_EQ(p.args.num_layers, 6);
  EXPECT_EQ(p.args.hidden_size, 512);
  EXPECT_EQ(p.args.normalization, "RMSNorm");
  EXPECT_TRUE(p.args.swiglu);
  EXPECT_FALSE(p.args.add_bias_linear);  // store_false dests
  EXPECT_FALSE(p.args.add_position_embedding);
  ASSERT_EQ(p.given.size(), 6u);
  EXPECT_EQ(p.given[0].flag, "--num-layers");
  EXPECT_EQ(p.given[0].value, "6");
  EXPECT_EQ(p.given[3].value, "");
}

TEST(MegatronArgsParse, NegativeNumbersAndScientificNotationAreValues) {
  const auto p = parse_megatron_flags({"--lr", "3e-4", "--min-lr", "-1", "--norm-epsilon", "1E-6",
                                       "--moe-aux-loss-coeff", "3e-3", "1e-2", "--lr-warmup-init", "-.5",
                                       "--exit-interval", "-5", "--initial-loss-scale", "4294967296"});
  EXPECT_EQ(p.args.lr, 3e-4);
  EXPECT_DOUBLE_EQ(p.args.min_lr, -1);
  EXPECT_DOUBLE_EQ(p.args.norm_epsilon, 1e-6);
  EXPECT_EQ(p.args.moe_aux_loss_coeff, (std::vector<double>{3e-3, 1e-2}));
  EXPECT_DOUBLE_EQ(p.args.lr_warmup_init, -0.5);
  EXPECT_EQ(p.args.exit_interval, -5);
  EXPECT_DOUBLE_EQ(p.args.initial_loss_scale, 4294967296.0);
  // Negative values still fail validation where Megatron's rules forbid them.
  EXPECT_NE(parse_error(practice() + Argv{"--min-lr", "-1"}).find("--min-lr must be a finite number >= 0"),
            std::string::npos);
}

TEST(MegatronArgsParse, ListsTakeTheWordsUpToTheNextFlag) {
  auto p = parse_megatron_flags({"--data-path", "0.3", "a_text_document", "0.7", "b_text_document", "--split",
                                 "949,50,1"});
  EXPECT_EQ(*p.args.data_path, (Argv{"0.3", "a_text_document", "0.7", "b_text_document"}));
  EXPECT_EQ(p.args.split, "949,50,1");
  // The seed's DATA_PATH quoted: one argument of lines, counted as its words.
  p = parse_megatron_flags({"--data-path", "\n234215 /d/a_document\n74019  /d/b_document\n"});
  EXPECT_EQ(*p.args.data_path, (Argv{"234215", "/d/a_document", "74019", "/d/b_document"}));
  // argparse: "--flag=value" of a list is that one value.
  p = parse_megatron_flags({"--data-path=a_document"});
  EXPECT_EQ(*p.args.data_path, Argv{"a_document"});
  EXPECT_EQ(flags_error({"--data-path=a", "b"}), "unexpected argument 'b': Megatron takes no positional arguments");
  // nargs='*' may be empty for the parser; validation then says what is missing.
  p = parse_megatron_flags({"--data-path", "--split", "1"});
  EXPECT_TRUE(p.args.data_path && p.args.data_path->empty());
  QK_EXPECT_PARSE_ERROR(practice_model() + Argv{"--micro-batch-size", "1", "--train-iters", "5", "--lr", "1",
                                                "--data-path"},
                        "--data-path was given no prefixes");
  // nargs='+' may not.
  EXPECT_EQ(flags_error({"--moe-router-load-balancing-type", "--swiglu"}),
            "--moe-router-load-balancing-type expects at least one value but none was given");
  p = parse_megatron_flags({"--moe-router-load-balancing-type", "seq_aux_loss", "aux_loss"});
  EXPECT_EQ(p.args.moe_router_load_balancing_type, (Argv{"seq_aux_loss", "aux_loss"}));
}

TEST(MegatronArgsParse, RepeatedFlagKeepsTheLastValueAndAliasesWork) {
  auto p = parse_megatron_flags({"--num-layers", "6", "--swiglu", "--num-layers", "8"});
  EXPECT_EQ(p.args.num_layers, 8);
  ASSERT_EQ(p.given.size(), 2u);
  EXPECT_EQ(p.given[1].flag, "--num-layers");
  EXPECT_EQ(p.given[1].value, "8");
  p = parse_megatron_flags({"--persistent-save-interval", "50", "--override-opt_param-scheduler"});
  EXPECT_EQ(p.args.save_interval, 50);
  EXPECT_TRUE(p.args.override_opt_param_scheduler);
  EXPECT_EQ(p.given[0].flag, "--save-interval");
}

TEST(MegatronArgsParse, UnknownFlagNamesTheClosestKnownFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--hiden-size", "--hidden-size"},
      {"--num-layer", "--num-layers"},
      {"--use-flash-attention", "--use-flash-attn"},
      {"--lr-warmup-iter", "--lr-warmup-iters"},
      {"--disable-bias-linears", "--disable-bias-linear"},
      {"--micro_batch_size", "--micro-batch-size"},
      {"-lr", "--lr"},
      {"--num-expert=4", "--num-experts"},
  };
  for (const auto& [typo, want] : cases) {
    EXPECT_EQ(flags_error({typo}), "unknown flag " + typo.substr(0, typo.find('=')) + "; the closest known flag is " +
                                       want + " (qk pretrain-gpt --help lists every flag)");
  }
}

TEST(MegatronArgsParse, MissingValueNamesTheFlag) {
  EXPECT_EQ(flags_error({"--num-layers"}),
            "--num-layers expects an integer but none was given (it is the last argument)");
  EXPECT_EQ(flags_error({"--num-layers", "--hidden-size", "512"}),
            "--num-layers expects an integer but none was given (the next argument is '--hidden-size')");
  EXPECT_EQ(flags_error({"--lr"}), "--lr expects a number but none was given (it is the last argument)");
  EXPECT_EQ(flags_error({"--swiglu=true"}), "--swiglu is a switch and takes no value (got '--swiglu=true')");
}

TEST(MegatronArgsParse, BadValuesNameTheFlagTheValueAndWhatIsAllowed) {
  EXPECT_EQ(flags_error({"--num-layers", "six"}), "--num-layers: 'six' is not an integer");
  EXPECT_EQ(flags_error({"--num-layers", "6.0"}), "--num-layers: '6.0' is not an integer");
  EXPECT_EQ(flags_error({"--num-layers", "99999999999999999999"}),
            "--num-layers: '99999999999999999999' is out of the 64-bit integer range");
  EXPECT_EQ(flags_error({"--lr", "abc"}), "--lr: 'abc' is not a number (e.g. 0.1, 3e-3, 1e-6)");
  EXPECT_EQ(flags_error({"--lr", "0x10"}), "--lr: '0x10' is not a number (e.g. 0.1, 3e-3, 1e-6)");
  EXPECT_EQ(flags_error({"--normalization", "rmsnorm"}),
            "--normalization: 'rmsnorm' is not one of the choices: LayerNorm, RMSNorm");
  EXPECT_EQ(flags_error({"--timing-log-level", "3"}), "--timing-log-level: '3' is not one of the choices: 0, 1, 2");
  EXPECT_EQ(flags_error({"--moe-router-load-balancing-type", "aux_loss", "balanced"}),
            "--moe-router-load-balancing-type: 'balanced' is not one of the choices: aux_loss, seq_aux_loss, "
            "global_aux_loss, sinkhorn, none");
  EXPECT_EQ(flags_error({"--num-layers", "6", "7"}), "unexpected argument '7': --num-layers before it takes one value");
  EXPECT_EQ(flags_error({"--swiglu", "yes"}),
            "unexpected argument 'yes': --swiglu before it is a switch and takes no value");
  EXPECT_EQ(flags_error({"--moe-layer-freq", "([0]*1+[1]*x)"}),
            "--moe-layer-freq '([0]*1+[1]*x)': unexpected 'x' at character 12 (allowed: digits , [ ] ( ) + *)");
}

TEST(MegatronArgsParse, HelpWinsWhereverItStands) {
  EXPECT_TRUE(parse_megatron_flags({"--num-layers", "6", "--help"}).help);
  EXPECT_TRUE(recipes::parse_megatron_args({"--bogus", "-h"}).help);
}

TEST(MegatronArgsParse, MoeLayerFrequencyIsMegatronsPatternLanguage) {
  using recipes::detail::parse_layer_frequency;
  EXPECT_EQ(parse_layer_frequency("([0]*1+[1]*5)").pattern, (std::vector<int64_t>{0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(parse_layer_frequency("([1]*3+[0]*1)*2").pattern, (std::vector<int64_t>{1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(parse_layer_frequency("[1,0]*2").pattern, (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ(parse_layer_frequency("2*[0, 1,]").pattern, (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(parse_layer_frequency(" 3 ").every, 3);
  EXPECT_TRUE(parse_layer_frequency("2").pattern.empty());
  for (const char* bad : {"", "0", "2*3", "(2)", "[2]", "[[1]]", "[1]+1", "[1]*[1]", "[1", "[1]*9999999",
                          "__import__('os')"})
    EXPECT_THROW(parse_layer_frequency(bad), ValueError) << bad;
  recipes::MegatronArgs a;
  a.num_layers = 5;
  a.moe_layer_freq.every = 2;
  EXPECT_EQ(recipes::moe_layer_pattern(a), (std::vector<int64_t>{1, 0, 1, 0, 1}));
  a.moe_layer_freq = parse_layer_frequency("[0]+[1]*3");
  EXPECT_THROW(recipes::moe_layer_pattern(a), ValueError);
}

// Megatron-LM main, megatron/training/arguments.py at commit 000c4ac24f61159c138b0975def722c65245983c:
// the defaults of its add_argument calls, written out here by hand.
TEST(MegatronArgsDefaults, EqualMegatronsArgumentsPy) {
  const recipes::MegatronArgs d;
  EXPECT_EQ(d.num_layers, std::nullopt);
  EXPECT_EQ(d.hidden_size, std::nullopt);
  EXPECT_EQ(d.ffn_hidden_size, std::nullopt);
  EXPECT_EQ(d.num_attention_heads, std::nullopt);
  EXPECT_EQ(d.kv_channels, std::nullopt);
  EXPECT_EQ(d.num_query_groups, 1);
  EXPECT_FALSE(d.group_query_attention);
  EXPECT_EQ(d.position_embedding_type, "learned_absolute");
  EXPECT_EQ(d.rotary_base, 10000);
  EXPECT_EQ(d.rotary_percent, 1.0);
  EXPECT_EQ(d.rotary_seq_len_interpolation_factor, std::nullopt);
  EXPECT_TRUE(d.add_position_embedding);
  EXPECT_EQ(d.make_vocab_size_divisible_by, 128);
  EXPECT_EQ(d.normalization, "LayerNorm");
  EXPECT_EQ(d.norm_epsilon, 1e-5);
  EXPECT_EQ(d.attention_dropout, 0.1);
  EXPECT_EQ(d.hidden_dropout, 0.1);
  EXPECT_EQ(d.weight_decay, 0.01);
  EXPECT_EQ(d.weight_decay_incr_style, "constant");
  EXPECT_EQ(d.clip_grad, 1.0);
  EXPECT_EQ(d.adam_beta1, 0.9);
  EXPECT_EQ(d.adam_beta2, 0.999);
  EXPECT_EQ(d.adam_eps, 1e-08);
  EXPECT_EQ(d.micro_batch_size, std::nullopt);
  EXPECT_EQ(d.global_batch_size, std::nullopt);
  EXPECT_EQ(d.log_interval, 100);
  EXPECT_TRUE(d.add_bias_linear);
  EXPECT_TRUE(d.apply_rope_fusion);
  EXPECT_EQ(d.optimizer, "adam");
  EXPECT_EQ(d.seed, 1234);
  EXPECT_EQ(d.init_method_std, 0.02);
  EXPECT_EQ(d.lr, std::nullopt);
  EXPECT_EQ(d.lr_decay_style, "linear");
  EXPECT_EQ(d.lr_wsd_decay_style, "exponential");
  EXPECT_EQ(d.lr_warmup_iters, 0);
  EXPECT_EQ(d.lr_warmup_fraction, std::nullopt);
  EXPECT_EQ(d.lr_warmup_init, 0.0);
  EXPECT_EQ(d.min_lr, 0.0);
  EXPECT_EQ(d.ckpt_format, "torch_dist");
  EXPECT_EQ(d.initial_loss_scale, 4294967296.0);
  EXPECT_EQ(d.min_loss_scale, 1.0);
  EXPECT_EQ(d.loss_scale_window, 1000);
  EXPECT_EQ(d.hysteresis, 2);
  EXPECT_EQ(d.tensor_model_parallel_size, 1);
  EXPECT_EQ(d.pipeline_model_parallel_size, 1);
  EXPECT_EQ(d.context_parallel_size, 1);
  EXPECT_EQ(d.distributed_backend, "nccl");
  EXPECT_EQ(d.distributed_timeout_minutes, 10);
  EXPECT_EQ(d.eval_iters, 100);
  EXPECT_EQ(d.eval_interval, 1000);
  EXPECT_EQ(d.split, std::nullopt);
  EXPECT_EQ(d.num_workers, 2);
  EXPECT_EQ(d.vocab_extra_ids, 0);
  EXPECT_EQ(d.tokenizer_type, std::nullopt);
  EXPECT_EQ(d.expert_model_parallel_size, 1);
  EXPECT_EQ(d.moe_router_topk, 2);
  EXPECT_EQ(d.moe_router_score_function, "softmax");
  EXPECT_EQ(d.moe_token_dispatcher_type, "allgather");
  EXPECT_EQ(d.moe_router_load_balancing_type, Argv{"aux_loss"});
  EXPECT_EQ(d.moe_aux_loss_coeff, std::vector<double>{0.0});
  EXPECT_EQ(d.moe_layer_freq.every, 1);
  EXPECT_EQ(d.moe_router_bias_update_rate, 1e-3);
  EXPECT_EQ(d.moe_token_drop_policy, "probs");
  EXPECT_EQ(d.kv_lora_rank, 32);
  EXPECT_EQ(d.qk_head_dim, 128);
  EXPECT_EQ(d.qk_pos_emb_head_dim, 64);
  EXPECT_EQ(d.v_head_dim, 128);
  EXPECT_EQ(d.timing_log_level, 0);
  EXPECT_EQ(d.tensorboard_log_interval, 1);
  EXPECT_EQ(d.wandb_project, "");
  EXPECT_EQ(d.transformer_impl, "transformer_engine");
  EXPECT_EQ(d.fp8_recipe, "delayed");
}

TEST(MegatronArgsTable, SpellingsAndFieldsAreUniqueAndEveryRuleNamesAFlag) {
  const auto flags = recipes::megatron_flags();
  EXPECT_GT(flags.size(), 200u);
  std::set<std::string> spellings, dests;
  const auto& groups = recipes::detail::group_order();
  for (const auto& f : flags) {
    EXPECT_TRUE(spellings.insert(f.flag).second) << f.flag;
    for (const auto& a : f.aliases) EXPECT_TRUE(spellings.insert(a).second) << a;
    EXPECT_TRUE(dests.insert(f.dest).second) << f.dest;
    EXPECT_TRUE(f.flag.starts_with("--")) << f.flag;
    EXPECT_FALSE(f.help.empty()) << f.flag;
    EXPECT_NE(std::find(groups.begin(), groups.end(), f.group), groups.end()) << f.group;
    EXPECT_EQ(f.status == recipes::FlagStatus::kSupported && !f.status_depends_on_value, f.status_text.empty())
        << f.flag;
    // A default must itself be an allowed choice.
    if (!f.choices.empty() && f.default_value != "None" && f.type != "str list") {
      EXPECT_NE(std::find(f.choices.begin(), f.choices.end(), f.default_value), f.choices.end()) << f.flag;
    }
  }
  for (const auto& r : recipes::detail::status_rules())
    EXPECT_NE(recipes::detail::find_flag(r.flag), nullptr) << "status rule for unknown flag " << r.flag;
  // Issue 18 built every MoE and MLA flag: supported, every value (an
  // expert tensor size other than the tensor size is the one refusal).
  for (const auto& f : flags) {
    if (f.group != "moe" && f.group != "mla") continue;
    if (f.flag == "--expert-tensor-parallel-size") {
      EXPECT_EQ(f.status, recipes::FlagStatus::kNotYet);
      EXPECT_TRUE(f.status_depends_on_value);
      continue;
    }
    EXPECT_EQ(f.status, recipes::FlagStatus::kSupported) << f.flag;
    EXPECT_FALSE(f.status_depends_on_value) << f.flag;
  }
}

TEST(MegatronArgsFormat, PythonFloatsPrintAsPythonsRepr) {
  using recipes::detail::python_float;
  // Expected strings are Python 3's repr() of the same doubles.
  const std::vector<std::pair<double, std::string>> cases = {
      {0.1, "0.1"},     {1e-5, "1e-05"},      {1e-4, "0.0001"},         {0.00012, "0.00012"},
      {1e-08, "1e-08"}, {3e-3, "0.003"},      {0.086, "0.086"},          {1.0, "1.0"},
      {0.0, "0.0"},     {-0.0, "-0.0"},       {4294967296.0, "4294967296.0"}, {1e16, "1e+16"},
      {9999999999999998.0, "9999999999999998.0"}, {1.5e-7, "1.5e-07"}, {123456.789, "123456.789"},
      {1.2345678901234568e+17, "1.2345678901234568e+17"}, {-2.5, "-2.5"}, {1e100, "1e+100"},
      {std::numeric_limits<double>::infinity(), "inf"}, {std::numeric_limits<double>::quiet_NaN(), "nan"}};
  for (const auto& [v, want] : cases) EXPECT_EQ(python_float(v), want);
  // Any finite double: shortest text that reads back to the same value, in Python's layout.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t bits = rng();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    if (!std::isfinite(v)) continue;
    const std::string s = python_float(v);
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), v) << s;
    const double m = std::fabs(v);
    const bool fixed = m == 0 || (m >= 1e-4 && m < 1e16);
    EXPECT_EQ(s.find('e') == std::string::npos, fixed) << s;
    if (fixed) {
      EXPECT_NE(s.find('.'), std::string::npos) << s;
    }
  }
}

TEST(MegatronArgsFormat, DumpIsMegatronsPrintArgs) {
  auto p = recipes::parse_megatron_args(practice(), options(2));
  const std::string dump = recipes::format_megatron_args(p.args);
  EXPECT_EQ(dump.find("------------------------ arguments ------------------------\n"), 0u);
  EXPECT_TRUE(dump.ends_with("\n-------------------- end of arguments ---------------------\n"));
  const auto line = [](const std::string& name, const std::string& value) {
    return "\n  " + name + " " + std::string(48 - name.size(), '.') + " " + value + "\n";
  };
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"num_layers", "6"}, {"norm_epsilon", "1e-05"}, {"initial_loss_scale", "4294967296.0"},
           {"adam_eps", "1e-08"}, {"lr", "0.0003"}, {"load", "None"}, {"swiglu", "True"},
           {"add_bias_linear", "False"}, {"moe_router_load_balancing_type", "['aux_loss']"},
           {"moe_aux_loss_coeff", "[0.0]"}, {"moe_layer_freq", "1"}, {"ffn_hidden_size", "1344"},
           {"data_parallel_size", "2"}, {"world_size", "2"}, {"params_dtype", "torch.float32"},
           {"wandb_project", ""}, {"dataloader_type", "single"}, {"start_weight_decay", "0.01"}})
    EXPECT_NE(dump.find(line(name, value)), std::string::npos) << name << " = " << value;
  // Sorted case-insensitively, one line per field.
  std::vector<std::string> lines;
  for (size_t b = dump.find('\n') + 1, e; (e = dump.find('\n', b)) != std::string::npos; b = e + 1)
    if (dump.compare(b, 2, "  ") == 0) lines.push_back(dump.substr(b, e - b));
  EXPECT_TRUE(std::is_sorted(lines.begin(), lines.end()));
  EXPECT_EQ(lines.size(), recipes::megatron_flags().size() + 5);  // + rank, world, dp, vpp, params_dtype
}

TEST(MegatronArgsFormat, HelpGroupsEveryFlagAsMegatronDoes) {
  const std::string h = recipes::megatron_help();
  size_t last = 0;
  for (auto g : recipes::detail::group_order()) {
    const size_t at = h.find("\n" + std::string(g) + ":\n");
    ASSERT_NE(at, std::string::npos) << g;
    EXPECT_GT(at, last) << g << " out of Megatron's order";
    last = at;
  }
  for (const auto& f : recipes::megatron_flags())
    EXPECT_NE(h.find("\n  " + f.flag + (f.aliases.empty() ? "" : ", " + f.aliases[0])), std::string::npos) << f.flag;
  for (const char* want : {
           "\n  --num-layers INT  (int, default None)  [supported]\n      Number of transformer layers.\n",
           "\n  --pipeline-model-parallel-size INT  (int, default 1)  [supported]\n"
           "      Degree of pipeline model parallelism.\n",
           "\n  --context-parallel-size INT  (int, default 1)  [NOT YET beyond the default]\n",
           "\n  --use-mcore-models  (switch, default False)  [no-op]\n",
           "\n  --normalization {LayerNorm,RMSNorm}  (str, default LayerNorm)  [supported]\n",
           "\n  --data-path [STR ...]  (str list, default None)  [supported]\n",
           "\n  --position-embedding-type {learned_absolute,rope,mrope,relative,none}  (str, default "
           "learned_absolute)  [supported; some values NOT YET]\n",
           "\n  --save-interval, --persistent-save-interval INT  (int, default None)  [supported]\n",
           "MT-Megatron/DeepSeek-V2 fork flag, not upstream"})
    EXPECT_NE(h.find(want), std::string::npos) << want;
}

TEST(MegatronArgsTable, EditDistance) {
  using recipes::detail::edit_distance;
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("--lr", "--lr"), 0u);
}

}  // namespace
}  // namespace qk::test
