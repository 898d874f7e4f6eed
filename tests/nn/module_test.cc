// nn::Module: registration and dotted names, traversal order, train/eval,
// apply, to(), zero_grad, state_dict/load_state_dict and its errors.
#include <gtest/gtest.h>

#include <sstream>

#include "qk/autograd/functions.h"
#include "qk/nn/nn.h"

namespace {

using namespace qk;
namespace nn = qk::nn;

struct BlockImpl : nn::Module {
  BlockImpl() {
    conv = register_module("conv", nn::Conv2d(nn::Conv2dOptions(2, 3, 3).padding(1).bias(false)));
    bn = register_module("bn", nn::BatchNorm2d(3));
  }
  Tensor forward(const Tensor& x) { return relu(bn(conv(x))); }
  nn::Conv2d conv{nullptr};
  nn::BatchNorm2d bn{nullptr};
};
QK_MODULE(Block);

struct NetImpl : nn::Module {
  NetImpl() {
    scale = register_parameter("scale", ones({1}));
    block = register_module("block", Block());
    head = register_module("head", nn::Sequential(nn::Flatten(), nn::Linear(3 * 4 * 4, 5), nn::ReLU(),
                                                  nn::Linear(nn::LinearOptions(5, 2).bias(false))));
    step = register_buffer("step", zeros({}, DType::i64));
  }
  Tensor forward(const Tensor& x) { return head(block(x) * scale); }
  Tensor scale, step;
  Block block{nullptr};
  nn::Sequential head{nullptr};
};
QK_MODULE(Net);

TEST(Module, NamesParametersBuffersAndChildrenInOrder) {
  Net net;
  std::vector<std::string> want = {"scale", "block.conv.weight", "block.bn.weight", "block.bn.bias",
                                   "head.1.weight", "head.1.bias", "head.3.weight"};
  EXPECT_EQ(net->named_parameters().keys(), want);
  EXPECT_EQ(net->parameters().size(), want.size());
  EXPECT_EQ(net->named_parameters(/*recurse=*/false).keys(), std::vector<std::string>{"scale"});
  std::vector<std::string> bufs = {"step", "block.bn.running_mean", "block.bn.running_var",
                                   "block.bn.num_batches_tracked"};
  EXPECT_EQ(net->named_buffers().keys(), bufs);
  EXPECT_EQ(net->named_children().keys(), (std::vector<std::string>{"block", "head"}));
  std::vector<std::string> mods = {"", "block", "block.conv", "block.bn", "head", "head.0", "head.1",
                                   "head.2", "head.3"};
  EXPECT_EQ(net->named_modules().keys(), mods);
  EXPECT_EQ(net->modules(/*include_self=*/false).size(), mods.size() - 1);
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
  for (const Tensor& b : net->buffers()) EXPECT_FALSE(b.requires_grad());
  // The member handles are the registered tensors.
  EXPECT_TRUE(net->named_parameters()["block.conv.weight"].is_same(net->block->conv->weight));
  EXPECT_EQ(net->head->size(), 4u);
  EXPECT_EQ(net->head->at<nn::LinearImpl>(1).options.out_features(), 5);
  EXPECT_THROW(net->head->at<nn::LinearImpl>(0), ValueError);
}

TEST(Module, RegistrationErrors) {
  auto m = std::make_shared<nn::Module>();
  m->register_parameter("w", zeros({2}));
  EXPECT_THROW(m->register_parameter("w", zeros({2})), ValueError);
  EXPECT_THROW(m->register_buffer("w", zeros({2})), ValueError);
  EXPECT_THROW(m->register_parameter("a.b", zeros({2})), ValueError);
  EXPECT_THROW(m->register_parameter("", zeros({2})), ValueError);
  EXPECT_THROW(m->register_parameter("i", zeros({2}, DType::i64)), TypeError);
  EXPECT_THROW(m->register_module("w", nn::Linear(2, 2)), ValueError);
  nn::Linear empty{nullptr};
  EXPECT_TRUE(empty.is_empty());
  EXPECT_THROW(empty->forward(zeros({1, 2})), ValueError);
  EXPECT_THROW(m->register_module("e", empty), ValueError);
  nn::Module on_stack;
  EXPECT_THROW(on_stack.modules(), ValueError);  // needs a shared_ptr for "self"
}

TEST(Module, TrainEvalAndApply) {
  Net net;
  EXPECT_TRUE(net->is_training());
  net->eval();
  for (const auto& m : net->modules()) EXPECT_FALSE(m->is_training()) << m->name();
  net->train();
  EXPECT_TRUE(net->block->bn->is_training());
  int count = 0;
  net->apply([&](nn::Module& m) {
    ++count;
    if (auto* lin = dynamic_cast<nn::LinearImpl*>(&m)) nn::init::zeros_(lin->weight);
  });
  EXPECT_EQ(count, 9);
  EXPECT_EQ(qk::sum(qk::abs(net->head->at<nn::LinearImpl>(3).weight)).item<float>(), 0.0f);
}

TEST(Module, ToConvertsInPlaceAndGradsFollow) {
  Net net;
  Tensor w = net->block->conv->weight;  // a handle taken before the conversion
  Tensor x = randn({2, 2, 4, 4});
  qk::sum(net->forward(x)).backward();
  ASSERT_TRUE(w.grad().defined());
  auto before = w.to_vector<double>();
  net->to(DType::f64);
  EXPECT_EQ(w.dtype(), DType::f64);
  EXPECT_EQ(net->block->conv->weight.dtype(), DType::f64);
  EXPECT_EQ(w.grad().dtype(), DType::f64);
  EXPECT_EQ(w.to_vector<double>(), before);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_EQ(net->named_buffers()["block.bn.num_batches_tracked"].dtype(), DType::i64);  // not floating
  EXPECT_EQ(net->named_buffers()["block.bn.running_var"].dtype(), DType::f64);
  Tensor y = net->forward(x.to(DType::f64));  // runs in f64 now
  EXPECT_EQ(y.dtype(), DType::f64);
  net->zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(Module, StateDictRoundTrip) {
  manual_seed(1);
  Net a;
  manual_seed(2);
  Net b;
  auto sd = a->state_dict();
  EXPECT_EQ(sd.size(), 11u);  // 7 parameters + 4 buffers
  EXPECT_FALSE(sd["scale"].requires_grad());
  b->load_state_dict(sd);
  for (const auto& item : a->state_dict())
    EXPECT_EQ(b->state_dict()[item.key()].to_vector<double>(), item.value().to_vector<double>()) << item.key();
  // Copies, not aliases.
  EXPECT_FALSE(b->block->conv->weight.storage() == a->block->conv->weight.storage());
}

TEST(Module, LoadStateDictErrorsNameTheKeys) {
  Net net;
  auto sd = net->state_dict();
  nn::NamedTensors missing;
  for (const auto& item : sd)
    if (item.key() != "head.1.bias") missing.insert(item.key(), item.value());
  missing.insert("head.9.weight", zeros({2}));
  try {
    net->load_state_dict(missing);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("missing keys 'head.1.bias'"), std::string::npos) << m;
    EXPECT_NE(m.find("unexpected keys 'head.9.weight'"), std::string::npos) << m;
  }
  net->load_state_dict(missing, /*strict=*/false);  // the common keys load

  nn::NamedTensors wrong;
  for (const auto& item : sd) wrong.insert(item.key(), item.value());
  wrong["head.1.weight"] = zeros({5, 47});
  Tensor before = net->named_parameters()["scale"].clone();
  wrong["scale"] = full({1}, 3.0);
  try {
    net->load_state_dict(wrong);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'head.1.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find("[5, 47]"), std::string::npos) << m;
    EXPECT_NE(m.find("[5, 48]"), std::string::npos) << m;
  }
  // Nothing was copied by the failed load.
  EXPECT_EQ(net->named_parameters()["scale"].to_vector<float>(), before.to_vector<float>());

  nn::NamedTensors wrong_dtype;
  for (const auto& item : sd) wrong_dtype.insert(item.key(), item.value());
  wrong_dtype["scale"] = ones({1}, DType::f64);
  try {
    net->load_state_dict(wrong_dtype);
    FAIL() << "expected TypeError";
  } catch (const TypeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'scale'"), std::string::npos) << m;
    EXPECT_NE(m.find("f64"), std::string::npos) << m;
  }
}

// GPT-style weight tying: the output projection shares the embedding matrix.
TEST(Module, TiedWeightsAreListedOnceAndSavedUnderEachName) {
  auto m = std::make_shared<nn::Module>();
  auto wte = m->register_module("wte", nn::Embedding(10, 4));
  auto head = m->register_module("head", nn::Linear(nn::LinearOptions(4, 10).bias(false)));
  head->replace_parameter("weight", wte->weight);
  head->weight = wte->weight;
  EXPECT_EQ(m->named_parameters().keys(), std::vector<std::string>{"wte.weight"});
  EXPECT_EQ(m->state_dict().keys(), (std::vector<std::string>{"wte.weight", "head.weight"}));
  Tensor tokens = from_vector<int64_t>({1, 2}, {2});
  qk::sum(head->forward(wte->forward(tokens))).backward();
  EXPECT_TRUE(wte->weight.grad().defined());  // both uses accumulate into one gradient
  m->to(DType::f64);
  EXPECT_EQ(head->weight.dtype(), DType::f64);
  EXPECT_TRUE(head->weight.is_same(wte->weight));
  EXPECT_THROW(head->replace_parameter("nope", wte->weight), ValueError);
  EXPECT_THROW(head->replace_parameter("weight", wte->weight * 2.0), ValueError);
}

TEST(Module, PrintsTheTree) {
  nn::Sequential s(nn::Linear(4, 2), nn::ReLU(), nn::Dropout(0.25));
  std::ostringstream os;
  os << *s;
  EXPECT_EQ(os.str(),
            "Sequential(\n  (0): Linear(in_features=4, out_features=2, bias=true)\n  (1): ReLU()\n"
            "  (2): Dropout(p=0.25)\n)");
}

}  // namespace
