// The Megatron flag table behind qk/recipes/megatron_args.h: one row per flag
// (its spelling, the MegatronArgs field it sets, argparse action, choices, help),
// the status rules, and the helpers the parser, validator and printers share.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "qk/recipes/megatron_args.h"

namespace qk::recipes::detail {

using A = MegatronArgs;
// The field a flag sets; its type is the flag's value type.
using FieldRef =
    std::variant<bool A::*, int64_t A::*, std::optional<int64_t> A::*, double A::*,
                 std::optional<double> A::*, std::string A::*, std::optional<std::string> A::*,
                 std::vector<std::string> A::*, std::optional<std::vector<std::string>> A::*,
                 std::vector<double> A::*, LayerFrequency A::*>;

// argparse actions: one value, store_true, store_false, nargs='*', nargs='+'.
enum class Action { kStore, kStoreTrue, kStoreFalse, kListAny, kListOneOrMore };
// "name", &MegatronArgs::name in a row: the dest string and the field can never disagree.
#define QK_FIELD(name) #name, &::qk::recipes::MegatronArgs::name
// Short names for the rows of the flag table (megatron_args_flags_*.cc).
inline constexpr Action kStore = Action::kStore, kTrue = Action::kStoreTrue, kFalse = Action::kStoreFalse,
                        kStar = Action::kListAny, kPlus = Action::kListOneOrMore;

struct FlagSpec {
  std::string_view group;  // Megatron's argument group title
  std::string_view flag;   // primary spelling
  std::string_view dest;   // the field's name (Megatron's dest)
  FieldRef field;
  Action action = Action::kStore;
  std::vector<std::string_view> choices;
  std::string_view help;
  std::string_view alias = {};  // a second spelling argparse accepts
};

// Megatron's group titles, in arguments.py's order.
inline constexpr std::string_view kNetworkSize = "network size";
inline constexpr std::string_view kRegularization = "regularization";
inline constexpr std::string_view kTraining = "training";
inline constexpr std::string_view kInitialization = "initialization";
inline constexpr std::string_view kLearningRate = "learning rate";
inline constexpr std::string_view kCheckpointing = "checkpointing";
inline constexpr std::string_view kMixedPrecision = "mixed precision";
inline constexpr std::string_view kDistributed = "distributed";
inline constexpr std::string_view kValidation = "validation";
inline constexpr std::string_view kData = "data and dataloader";
inline constexpr std::string_view kTokenizer = "tokenizer";
inline constexpr std::string_view kMoe = "moe";
inline constexpr std::string_view kMla = "mla";
inline constexpr std::string_view kLogging = "logging";
inline constexpr std::string_view kTransformerEngine = "Transformer-Engine";
const std::vector<std::string_view>& group_order();

// Rows of the groups that shape the model, and of the groups that run it.
void add_model_flags(std::vector<FlagSpec>& t);     // megatron_args_flags_model.cc
void add_training_flags(std::vector<FlagSpec>& t);  // megatron_args_flags_training.cc
const std::vector<FlagSpec>& flag_table();
const FlagSpec* find_flag(std::string_view spelling);  // primary spelling or alias
const FlagSpec* find_flag_by_dest(std::string_view dest);
// Fields validate_megatron_args sets that no flag does (rank, world_size, ...),
// printed and saved with the rest.
struct DerivedField {
  const char* name;
  FieldRef field;
};
const std::vector<DerivedField>& derived_fields();

// A flag's status in this build (megatron_args_status.cc). Flags without a rule
// are supported.
struct StatusRule {
  std::string_view flag;
  FlagStatus status;
  // not yet: the missing feature ("pipeline parallelism"); no-op: what it means here.
  std::string_view what;
  // When set, the flag is refused exactly when this does not hold (e.g. size 1 is
  // fine with pipeline parallelism not built; rope is fine, mrope is not).
  bool (*fine)(const MegatronArgs&) = nullptr;
  std::string_view fine_note = {};  // e.g. "this build runs pipeline size 1"
  // An info line when the flag is given and `fine` holds (e.g. what
  // Megatron itself does with --sequence-parallel at tensor size 1).
  std::string_view accepted_note = {};
  // When set, accepted_note is given only when this holds (e.g. tensor size 1).
  bool (*note_when)(const MegatronArgs&) = nullptr;
};
const std::vector<StatusRule>& status_rules();
const StatusRule* find_status_rule(std::string_view flag);
// The refusal text without the flag, e.g. "context parallelism is not built yet;
// this build runs context size 1".
std::string not_yet_text(const StatusRule& r);

// Python's repr() of a float (1e-05, 0.0001, 4294967296.0, inf).
std::string python_float(double v);
// A field's value as Megatron's _print_args prints it.
std::string format_value(const MegatronArgs& a, const FieldRef& f);
// "int", "float", "str", "flag", "str list", "float list", "int or list".
std::string type_name(const FlagSpec& s);

// Megatron's moe_freq_type: "N" or a Python list expression of digits, [, ], (, ),
// +, * and commas. Throws ValueError saying what is wrong (without the flag name).
LayerFrequency parse_layer_frequency(std::string_view text);

// Levenshtein distance, for "did you mean".
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace qk::recipes::detail
