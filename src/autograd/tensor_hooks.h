// Installs this layer's implementation of Tensor's differentiable methods
// into the tensor layer (qk/tensor/autograd_hooks.h). Called before main()
// and by every path that creates autograd state (ensure_meta, an autocast
// guard), so the hooks are in place before any tensor needs them.
#pragma once

namespace qk::autograd {

void install_tensor_hooks();

}  // namespace qk::autograd
