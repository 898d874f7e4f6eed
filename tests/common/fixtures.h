// Reads PyTorch reference fixtures: JSON files written by the committed
// generator scripts (tests/fixtures/gen_*.py, run with Debian's python3-torch).
//
//   auto fx = qk::test::load_fixture("conv2d_basic.json");   // tests/fixtures/torch/
//   qk::Tensor x = fx.tensor("x");                            // f32 (or its "dtype")
//   double v = fx.scalar("eps");
//
// Format: {"tensors": {"name": {"shape": [..], "dtype": "f32", "data": [..]}},
//          "scalars": {"name": 1.0}}
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>

#include "qk/tensor/tensor.h"

namespace qk::test {

struct Fixture {
  nlohmann::json j;
  std::string name;

  Tensor tensor(const std::string& key) const {
    const auto& t = j.at("tensors").at(key);
    Shape shape = t.at("shape").get<Shape>();
    DType dt = t.contains("dtype") ? parse_dtype(t.at("dtype").get<std::string>()) : DType::f32;
    std::vector<double> data = t.at("data").get<std::vector<double>>();
    return from_vector<double>(data, shape, DType::f64).to(dt);
  }
  double scalar(const std::string& key) const { return j.at("scalars").at(key).get<double>(); }
  bool has(const std::string& key) const { return j.at("tensors").contains(key); }
};

inline Fixture load_fixture(const std::string& file) {
  std::string path = std::string(QK_SOURCE_DIR) + "/tests/fixtures/torch/" + file;
  std::ifstream f(path);
  if (!f) throw std::runtime_error("missing fixture " + path + "; run tests/fixtures/gen_*.py");
  Fixture fx;
  fx.j = nlohmann::json::parse(f);
  fx.name = file;
  return fx;
}

// Elementwise |a - b| <= atol + rtol * |b| with a readable failure message.
inline ::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol = 1e-5,
                                            double atol = 1e-6) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure()
           << "shapes differ: " << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  auto va = a.to_vector<double>();
  auto vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    double tol = atol + rtol * std::fabs(vb[i]);
    if (!(std::fabs(va[i] - vb[i]) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs expected "
                                           << vb[i] << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace qk::test
