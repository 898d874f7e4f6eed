#include "qk/models/cifar10.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "qk/autograd/autograd.h"
#include "qk/autograd/functions.h"
#include "qk/base/error.h"
#include "qk/tensor/backend.h"
#include "qk/base/file_io.h"
#include "qk/data/dataset.h"
#include "qk/data/loader.h"
#include "qk/models/resnet.h"
#include "qk/models/simple_cnn.h"
#include "qk/nn/safetensors.h"
#include "qk/nn/serialize.h"

namespace qk::models {

CifarModel make_cifar_model(const std::string& name) {
  CifarModel m;
  m.name = name;
  if (name == "simple_cnn") {
    SimpleCNN net(10);
    m.module = net.ptr();
    m.forward = [net](const Tensor& x) { return net->forward(x); };
  } else if (name == "simple_resnet") {
    SimpleResNet net(10);
    m.module = net.ptr();
    m.forward = [net](const Tensor& x) { return net->forward(x); };
  } else {
    QK_THROW(ValueError, "Unknown --model '", name, "'; expected one of ", kCifarModelNames);
  }
  return m;
}

void use_channels_last(CifarModel& m) {
  auto inner = m.forward;
  // [N, C, H, W] stored [N, H, W, C], through differentiable views and one copy.
  m.forward = [inner](const Tensor& x) {
    QK_CHECK(x.dim() == 4, "channels last: expected images [N, C, H, W], got ", shape_str(x.shape()));
    return inner(x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}));
  };
}

int64_t count_parameters(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

data::Cifar10 open_cifar10(const std::string& data_dir, bool allow_synth, int64_t synth_train,
                           int64_t synth_test, uint64_t synth_seed) {
  if (!data::cifar10_present(data_dir)) {
    QK_CHECK_AS(IoError, allow_synth, "No CIFAR-10 in '", data_dir,
                "' (expected cifar-10-batches-bin/). Train first (it writes a synthetic set there), "
                "run `qk data synth-cifar --out ", data_dir, "`, or `qk data download-cifar --data-dir ",
                data_dir, "`");
    fmt::print("no CIFAR-10 in '{}': writing a SYNTHETIC CIFAR-10 there ({} train + {} test images, seed {})\n",
            data_dir, synth_train, synth_test, synth_seed);
    data::synth_cifar(data_dir, {.num_train = synth_train, .num_test = synth_test, .seed = synth_seed});
  }
  data::Cifar10 d = data::load_cifar10(data_dir);
  if (d.synthetic) {
    fmt::print("data: SYNTHETIC CIFAR-10 (written by qk data synth-cifar) in {}: {} train, {} test images; "
            "accuracies below are NOT CIFAR-10 results\n",
            d.dir, d.train.size(), d.test.size());
  } else {
    fmt::print("data: CIFAR-10 in {}: {} train, {} test images\n", d.dir, d.train.size(), d.test.size());
  }
  return d;
}

Device usable_device(const std::string& flag, int local_rank) {
  try {
    return resolve_device(flag, local_rank);
  } catch (const DeviceError& e) {
    QK_THROW(ValueError, "--device ", flag, ": ", e.message());
  } catch (const Error& e) {
    QK_THROW(ValueError, "--device: ", e.message());
  }
}

Device model_device(const CifarModel& m) {
  const std::vector<Tensor> ps = m.module->parameters();
  return ps.empty() ? kCPU : ps.front().device();
}

EvalResult evaluate_cifar(const CifarModel& m, const data::Cifar10Split& split, bool keep_predictions) {
  const Device dev = model_device(m);
  auto ds = std::make_shared<data::ImageDataset>(split);
  data::DataLoaderOptions o;
  o.batch_size = kCifarEvalBatch;
  o.shuffle = false;
  data::DataLoader loader(ds, o);
  const bool was_training = m.module->is_training();
  m.module->eval();
  NoGradGuard no_grad;
  EvalResult r;
  double loss_sum = 0;
  for (const data::Batch& b : loader) {
    // On the model's device; the scores come back for the host's bookkeeping.
    const Tensor images = dev.is_cpu() ? b.images : b.images.to(dev);
    const Tensor labels = dev.is_cpu() ? b.labels : b.labels.to(dev);
    const Tensor out = m.forward(images);
    const int64_t n = b.labels.numel();
    loss_sum += cross_entropy(out, labels).item<float>() * static_cast<double>(n);
    const Tensor logits = (dev.is_cpu() ? out : out.to(kCPU)).contiguous();
    const float* l = logits.data_ptr<float>();
    const int64_t* y = b.labels.data_ptr<int64_t>();
    const int64_t k = logits.size(1);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = l + i * k;
      const int64_t pred = std::max_element(row, row + k) - row;
      r.correct += pred == y[i];
      if (keep_predictions) {
        double z = 0;
        for (int64_t j = 0; j < k; ++j) z += std::exp(static_cast<double>(row[j] - row[pred]));
        r.predicted.push_back(pred);
        r.confidence.push_back(static_cast<float>(1.0 / z));
      }
    }
    r.total += n;
  }
  m.module->train(was_training);
  r.loss = r.total ? loss_sum / static_cast<double>(r.total) : 0;
  r.accuracy = r.total ? static_cast<double>(r.correct) / static_cast<double>(r.total) : 0;
  return r;
}

void load_cifar_weights(const CifarModel& m, const std::string& path) {
  QK_CHECK_AS(IoError, file_exists(path), "Checkpoint '", path,
              "' does not exist; train with `qk train cifar10 --out DIR` (it writes DIR/checkpoints/)");
  const nn::SafetensorsFile f = nn::load_safetensors(path);
  const auto it = f.metadata.find("model");
  const std::string file_model = it == f.metadata.end() ? "an unknown model" : "model '" + it->second + "'";
  std::set<std::string> want, have;
  std::string shape_errors;
  const auto state = m.module->state_dict();
  for (const auto& kv : state) {
    want.insert(kv.key());
    const auto t = f.tensors.find(kv.key());
    if (t != f.tensors.end() && t->second.shape() != kv.value().shape() && shape_errors.size() < 300) {
      shape_errors += " " + kv.key();
    }
  }
  for (const auto& kv : f.tensors) have.insert(kv.first);
  std::string missing, unexpected;
  int n_missing = 0, n_unexpected = 0;
  for (const auto& k : want) {
    if (!have.count(k) && n_missing++ < 6) missing += " " + k;
  }
  for (const auto& k : have) {
    if (!want.count(k) && n_unexpected++ < 6) unexpected += " " + k;
  }
  if (n_missing || n_unexpected || !shape_errors.empty()) {
    QK_THROW(ValueError, "Checkpoint '", path, "' holds ", file_model, " and does not fit --model ", m.name,
             ": ", n_missing, " keys missing (", missing.empty() ? " none" : missing, n_missing > 6 ? " ..." : "",
             "), ", n_unexpected, " unexpected (", unexpected.empty() ? " none" : unexpected,
             n_unexpected > 6 ? " ..." : "", ")", shape_errors.empty() ? "" : ", shape mismatch:" + shape_errors,
             ". Pass the --model the checkpoint was trained with");
  }
  nn::load(*m.module, path);
}

}  // namespace qk::models
