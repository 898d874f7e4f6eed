// The entry point of an extension library (a plugin built with
// qk_add_extension, loaded by qk::plugin::load_library or QK_EXTENSIONS):
//
//   #include "qk/plugin/extension.h"
//
//   QK_EXTENSION(my_ops, lib) {
//     lib.def("fused_bias_gelu(Tensor x, Tensor bias) -> Tensor")
//         .kernel(qk::DeviceType::cpu, fused_bias_gelu_cpu)
//         .backward(fused_bias_gelu_backward);
//   }
//
// The block becomes the body of a function taking `qk::plugin::Library& lib`
// whose namespace is my_ops; a library has one QK_EXTENSION block. QK_EXTENSION also exports one C symbol,
// qk_extension_entry, that tells the loader which qianka the plugin was
// compiled against; the loader refuses one built against another version
// (its C++ types may differ) before running any of its code.
//
// The plugin links no qianka library: its calls into qianka resolve to the
// host program's copy (docs/extensions.md says why), so there is one tensor
// allocator, one autograd engine and one op registry in the process.
#pragma once

#include <cstdint>

#include "qk/base/version.h"
#include "qk/plugin/library.h"

namespace qk::plugin {

// Bumped whenever the layout of ExtensionEntry, Library or OpDef changes.
inline constexpr uint32_t kExtensionAbiVersion = 1;

// What qk_extension_entry returns. abi_version stays the first member in
// every ABI, so any loader can read it.
struct ExtensionEntry {
  uint32_t abi_version;
  const char* qianka_version;  // QK_VERSION_STRING of the headers it was built with
  uint32_t tensor_size;        // sizeof(Tensor): a cheap layout witness
  uint32_t cxx11_string_abi;   // _GLIBCXX_USE_CXX11_ABI (std::string's layout)
  const char* ns;
  void (*init)(Library& lib);
};

#if defined(_GLIBCXX_USE_CXX11_ABI)
inline constexpr uint32_t kCxx11StringAbi = _GLIBCXX_USE_CXX11_ABI;
#else
inline constexpr uint32_t kCxx11StringAbi = 0;
#endif

}  // namespace qk::plugin

#define QK_EXTENSION_ENTRY_SYMBOL "qk_extension_entry"

#define QK_EXTENSION(ns, lib)                                                            \
  static void qk_extension_init_##ns(::qk::plugin::Library& lib);                        \
  extern "C" __attribute__((visibility("default"))) const ::qk::plugin::ExtensionEntry*  \
  qk_extension_entry() {                                                                 \
    static const ::qk::plugin::ExtensionEntry entry{                                     \
        ::qk::plugin::kExtensionAbiVersion, QK_VERSION_STRING,                           \
        static_cast<uint32_t>(sizeof(::qk::Tensor)), ::qk::plugin::kCxx11StringAbi, #ns, \
        &qk_extension_init_##ns};                                                        \
    return &entry;                                                                       \
  }                                                                                      \
  static void qk_extension_init_##ns(::qk::plugin::Library& lib)
