// The process-wide op registry, and calling an op: bind the values to the
// schema, pick the kernel for the tensors' device, record autograd.
#include "qk/plugin/registry.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "qk/autograd/autograd.h"
#include "qk/base/error.h"
#include "registry_impl.h"

namespace qk::plugin {

namespace {

struct Registry {
  std::shared_mutex mu;
  // Ops are never removed, so an OpDef* stays valid for the process's life.
  std::map<std::string, std::unique_ptr<OpDef>, std::less<>> ops;
  std::vector<LoadedLibrary> libraries;
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string op_names(const Registry& r) {
  if (r.ops.empty()) return "none (load one with qk::plugin::load_library or QK_EXTENSIONS)";
  std::string s;
  for (const auto& [name, op] : r.ops) s += (s.empty() ? "" : ", ") + name;
  return s;
}

}  // namespace

std::vector<std::string> detail::register_library(Library& lib, const std::string& origin) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  // All or nothing: check every op before adding one.
  for (const auto& op : lib.ops()) {
    auto it = r.ops.find(op->qualified_name);
    QK_CHECK(it == r.ops.end(), "op ", op->qualified_name, " is registered twice: by ",
             it->second->origin, " and again by ", origin,
             "; load each library once and give each its own namespace");
    QK_CHECK(op->kernel_devices() != "none", "op ", op->qualified_name, " (", origin,
             ") has no kernel; add one with .kernel(qk::DeviceType::cpu, fn)");
  }
  std::vector<std::string> names;
  for (auto& op : lib.ops()) {
    op->origin = origin;
    names.push_back(op->qualified_name);
    r.ops.emplace(op->qualified_name, std::move(op));
  }
  lib.ops().clear();
  r.libraries.push_back({origin, lib.ns(), names});
  return names;
}

std::vector<LoadedLibrary> loaded_libraries() {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  return r.libraries;
}

void define_library(const std::string& ns, const std::function<void(Library&)>& init,
                    const std::string& origin) {
  Library lib(ns);
  init(lib);
  detail::register_library(lib, origin);
}

const OpDef& find_op(std::string_view qualified_name) {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  auto it = r.ops.find(qualified_name);
  QK_CHECK(it != r.ops.end(), "no op named '", qualified_name, "'; the registered ops are ",
           op_names(r));
  return *it->second;
}

bool has_op(std::string_view qualified_name) {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  return r.ops.find(qualified_name) != r.ops.end();
}

std::vector<const OpDef*> all_ops() {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  std::vector<const OpDef*> out;
  for (const auto& [name, op] : r.ops) out.push_back(op.get());
  return out;
}

// ---- calling ----

namespace {

// The device every tensor argument is on (DeviceError when they differ).
Device common_device(const OpDef& op, const std::vector<Value>& args) {
  const Tensor* first = nullptr;
  size_t first_index = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].is_tensor()) continue;
    const Tensor& t = args[i].tensor();
    if (first == nullptr) {
      first = &t;
      first_index = i;
      continue;
    }
    QK_CHECK_DEVICE(t.device() == first->device(), op.qualified_name, ": argument '",
                    op.schema.arguments[i].name, "' is on ", t.device().str(), " but '",
                    op.schema.arguments[first_index].name, "' is on ", first->device().str(),
                    "; move them to one device");
  }
  return first->device();
}

std::vector<Tensor> backward_of(const OpDef& op, const std::vector<Value>& args,
                                const std::vector<Tensor>& outputs,
                                const std::vector<Tensor>& grads) {
  QK_CHECK(op.backward != nullptr, op.qualified_name,
           " has no backward, so no gradient flows through it; register one with "
           ".backward(fn) in its library, or call it under NoGradGuard / on detach()ed inputs");
  std::vector<Tensor> per_arg = op.backward(BackwardContext(op.schema, args, outputs, grads));
  QK_CHECK(per_arg.size() == args.size(), "backward of ", op.qualified_name, " returned ",
           per_arg.size(), " gradient(s); it must return one per argument (", args.size(),
           ", an undefined Tensor for scalars): ", op.schema.str());
  std::vector<Tensor> per_tensor;
  for (size_t i = 0; i < args.size(); ++i) {
    const Argument& a = op.schema.arguments[i];
    if (!args[i].is_tensor()) {
      QK_CHECK(!per_arg[i].defined(), "backward of ", op.qualified_name,
               " returned a gradient for scalar argument '", a.name, "'; return Tensor() there");
      continue;
    }
    const Tensor& g = per_arg[i];
    QK_CHECK(!g.defined() || g.shape() == args[i].tensor().shape(), "backward of ",
             op.qualified_name, ": the gradient of '", a.name, "' has shape ",
             shape_str(g.shape()), " but the argument has ", shape_str(args[i].tensor().shape()));
    per_tensor.push_back(g);
  }
  return per_tensor;
}

}  // namespace

std::vector<Tensor> call_op(const OpDef& op, const std::vector<Value>& values) {
  std::vector<Value> args = op.schema.bind(op.qualified_name, values);
  const Device device = common_device(op, args);
  QK_CHECK_DEVICE(op.has_kernel(device.type), op.qualified_name, " has no kernel for device ",
                  device.str(), " (it has: ", op.kernel_devices(),
                  "); move the tensors there, or register a kernel for ",
                  device_type_name(device.type), " in ", op.origin);
  std::vector<Tensor> outputs;
  {
    // The kernel is the raw op: autograd is recorded around it, once.
    autograd::NoGradGuard no_grad;
    outputs = op.kernels[static_cast<int>(device.type)](args);
  }
  QK_CHECK(outputs.size() == op.schema.num_outputs, "the ", device_type_name(device.type),
           " kernel of ", op.qualified_name, " returned ", outputs.size(),
           " tensor(s) but the schema declares ", op.schema.num_outputs, ": ", op.schema.str());
  std::vector<Tensor> tensor_args;
  for (const Value& v : args)
    if (v.is_tensor()) tensor_args.push_back(v.tensor());
  for (Tensor& o : outputs) {
    QK_CHECK(o.defined(), "the ", device_type_name(device.type), " kernel of ",
             op.qualified_name, " returned an undefined tensor");
    // An output that is an argument (or already in a graph) gets its own handle.
    if (autograd::meta(o) != nullptr) o = o.detach();
  }
  if (autograd::needs_grad(tensor_args)) {
    std::vector<Tensor> saved_outputs;
    for (const Tensor& o : outputs) saved_outputs.push_back(o.detach());
    autograd::record(op.backward_name.c_str(), tensor_args, outputs,
                     [&op, args, saved_outputs](const std::vector<Tensor>& grads) {
                       return backward_of(op, args, saved_outputs, grads);
                     });
  }
  return outputs;
}

std::vector<Tensor> call_multi(std::string_view qualified_name, const std::vector<Value>& args) {
  return call_op(find_op(qualified_name), args);
}

Tensor call(std::string_view qualified_name, const std::vector<Value>& args) {
  const OpDef& op = find_op(qualified_name);
  QK_CHECK(op.schema.num_outputs == 1, op.qualified_name, " returns ", op.schema.num_outputs,
           " tensors; use qk::plugin::call_multi: ", op.schema.str());
  return std::move(call_op(op, args)[0]);
}

}  // namespace qk::plugin
