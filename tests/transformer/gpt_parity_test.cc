// GPTModel against the PyTorch reference of tests/fixtures/gen_transformer.py:
// logits, loss and every parameter's gradient, GPT-2 and Llama layouts, f32
// and bf16 (parameters and activations bf16, as Megatron's --bf16 runs).
#include <gtest/gtest.h>

#include <set>

#include "qk/autograd/functions.h"
#include "qk/transformer/gpt_model.h"
#include "transformer/fixture_params.h"

namespace qk {
namespace {

using transformer::GPTModel;

struct Result {
  double logits = 0, loss = 0, grad = 0;  // worst scaled relative errors
};

nn::SafetensorsFile load_fixture(const std::string& layout, DType dtype) {
  return nn::load_safetensors(std::string(QK_SOURCE_DIR) + "/tests/fixtures/torch/transformer_" + layout + "_" +
                              dtype_name(dtype) + ".safetensors");
}

// Builds the layout's model with the fixture's parameters and checks it.
void check_layout(const std::string& layout, DType dtype, double rtol_logits, double rtol_grad, bool flash = false) {
  const nn::SafetensorsFile f = load_fixture(layout, dtype);
  transformer::TransformerConfig c = test::config_from_metadata(f.metadata);
  c.params_dtype = dtype;
  c.use_flash_attn = flash;
  GPTModel model(c);

  // Exactly the fixture's parameters, by Megatron-core name.
  std::set<std::string> expected;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind("grad.", 0) == 0) expected.insert(name.substr(5));
  std::set<std::string> ours;
  {
    NoGradGuard no_grad;
    for (const auto& item : model->named_parameters()) {
      const std::string& name = item.key();
      Tensor p = item.value();
      ours.insert(name);
      ASSERT_TRUE(expected.count(name)) << "parameter " << name << " is not in the reference";
      ASSERT_EQ(p.shape(), f.tensors.at("grad." + name).shape()) << name;
      p.copy_(test::fixture_param(name, p.shape()).to(dtype));
      ASSERT_EQ(p.dtype(), dtype) << name;
    }
  }
  ASSERT_EQ(ours, expected);

  const Tensor tokens = f.tensors.at("tokens"), labels = f.tensors.at("labels");
  const Tensor loss_mask = f.tensors.at("loss_mask");
  const Tensor logits = model(tokens);
  EXPECT_EQ(logits.dtype(), DType::f32);
  EXPECT_TRUE(test::close_scaled(logits, f.tensors.at("logits").to(DType::f32), rtol_logits, "logits"));

  const Tensor loss = model(tokens, Tensor(), labels, loss_mask);
  EXPECT_TRUE(test::close_scaled(loss.reshape({1}), f.tensors.at("loss"), rtol_logits, "loss"));
  loss.backward();
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    const Tensor& p = item.value();
    ASSERT_TRUE(p.grad().defined()) << name << " got no gradient";
    EXPECT_EQ(p.grad().dtype(), dtype) << name;
    EXPECT_TRUE(test::close_scaled(p.grad().to(DType::f32), f.tensors.at("grad." + name).to(DType::f32), rtol_grad,
                                   "grad." + name));
  }
}

// f32: the same math in another order; 1e-5 of each tensor's scale.
TEST(GPTParity, Gpt2LayoutF32) { check_layout("gpt2", DType::f32, 1e-5, 1e-5); }
TEST(GPTParity, LlamaLayoutF32) { check_layout("llama", DType::f32, 1e-5, 1e-5); }
// bf16: every op rounds to 8 bits; a rounding that lands differently
// propagates, so the bound is a few bf16 ulps (2^-8 = 0.4%) of the scale.
TEST(GPTParity, Gpt2LayoutBf16) { check_layout("gpt2", DType::bf16, 2e-2, 3e-2); }
TEST(GPTParity, LlamaLayoutBf16) { check_layout("llama", DType::bf16, 2e-2, 3e-2); }
// --use-flash-attn: the same reference, through the flash kernel.
TEST(GPTParity, Gpt2LayoutF32Flash) { check_layout("gpt2", DType::f32, 1e-5, 1e-5, true); }
TEST(GPTParity, LlamaLayoutF32Flash) { check_layout("llama", DType::f32, 1e-5, 1e-5, true); }
TEST(GPTParity, Gpt2LayoutBf16Flash) { check_layout("gpt2", DType::bf16, 2e-2, 3e-2, true); }
TEST(GPTParity, LlamaLayoutBf16Flash) { check_layout("llama", DType::bf16, 2e-2, 3e-2, true); }

}  // namespace
}  // namespace qk
