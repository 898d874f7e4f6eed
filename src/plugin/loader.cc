// Loading extension libraries: dlopen, the ABI check of QK_EXTENSION's
// entry, registration of its ops; QK_EXTENSIONS for programs like `qk`.
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "qk/base/env.h"
#include "qk/base/error.h"
#include "qk/base/log.h"
#include "qk/plugin/extension.h"
#include "qk/plugin/registry.h"
#include "registry_impl.h"

namespace qk::plugin {

QK_ENV_STRING(env_extensions, "QK_EXTENSIONS", "",
              "Extension libraries (built with qk_add_extension) that qk loads at start-up, "
              "':'-separated (docs/extensions.md).");

namespace {

std::mutex& loader_mutex() {
  static std::mutex mu;
  return mu;
}
// dlopen handle -> what it registered; loading a file twice is a no-op.
std::map<void*, LoadedLibrary>& loaded_by_handle() {
  static std::map<void*, LoadedLibrary> m;
  return m;
}

std::string demangle(const std::string& symbol) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : symbol;
}

// dlopen's message, with what it means for a qianka plugin.
std::string explain_dlopen_error(const std::string& path, const std::string& err) {
  const std::string undefined = "undefined symbol: ";
  if (auto at = err.find(undefined); at != std::string::npos) {
    std::string symbol = err.substr(at + undefined.size());
    symbol = symbol.substr(0, symbol.find_first_of(" \t\n,"));
    return ::qk::detail::str_cat(
        "cannot load extension library '", path, "': it needs '", demangle(symbol),
        "', which this program does not provide. Either the library was built against "
        "another qianka (rebuild it against this one), or this program was not linked with "
        "qk_enable_extensions() in CMake, which exports qianka's symbols to plugins. (dlopen: ",
        err, ")");
  }
  return ::qk::detail::str_cat("cannot load extension library '", path, "': ", err);
}

void check_entry(const std::string& path, const ExtensionEntry& e) {
  QK_CHECK_AS(IoError, e.abi_version == kExtensionAbiVersion, "extension library '", path,
              "' was built for extension ABI ", e.abi_version, " but this qianka (",
              QK_VERSION_STRING, ") has ABI ", kExtensionAbiVersion,
              "; rebuild it against this installation");
  QK_CHECK_AS(IoError, std::strcmp(e.qianka_version, QK_VERSION_STRING) == 0,
              "extension library '", path, "' was built against qianka ", e.qianka_version,
              " but this program is qianka ", QK_VERSION_STRING,
              "; rebuild it against this installation (find_package(qianka) from its prefix)");
  QK_CHECK_AS(IoError, e.tensor_size == sizeof(Tensor) && e.cxx11_string_abi == kCxx11StringAbi,
              "extension library '", path, "' was compiled with another C++ ABI (sizeof(Tensor) ",
              e.tensor_size, " vs ", sizeof(Tensor), ", _GLIBCXX_USE_CXX11_ABI ",
              e.cxx11_string_abi, " vs ", kCxx11StringAbi,
              "); build it with the same compiler and flags as qianka");
}

}  // namespace

LoadedLibrary load_library(const std::string& path) {
  QK_CHECK(!path.empty(), "load_library: empty path");
  if (path.find('/') != std::string::npos) {
    std::error_code ec;
    QK_CHECK_AS(IoError, std::filesystem::is_regular_file(path, ec), "extension library '",
                path, "' not found: no such file; build it (qk_add_extension) or fix the path");
  }
  std::lock_guard lock(loader_mutex());
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    QK_THROW(IoError, explain_dlopen_error(path, err ? err : "unknown error"));
  }
  if (auto it = loaded_by_handle().find(handle); it != loaded_by_handle().end()) {
    dlclose(handle);  // balances this dlopen; the first one keeps it loaded
    return it->second;
  }
  using EntryFn = const ExtensionEntry* (*)();
  auto entry_fn = reinterpret_cast<EntryFn>(dlsym(handle, QK_EXTENSION_ENTRY_SYMBOL));
  if (entry_fn == nullptr) {
    dlclose(handle);
    QK_THROW(IoError, "'", path, "' is not a qianka extension library: it exports no ",
             QK_EXTENSION_ENTRY_SYMBOL, " symbol; define its ops in a QK_EXTENSION(ns, lib) "
             "{ ... } block (qk/plugin/extension.h)");
  }
  const ExtensionEntry* entry = entry_fn();
  try {
    QK_CHECK_AS(IoError, entry != nullptr, "'", path, "': ", QK_EXTENSION_ENTRY_SYMBOL,
                " returned null");
    check_entry(path, *entry);
  } catch (...) {
    dlclose(handle);  // none of its code is referenced yet
    throw;
  }
  // From here on the library stays loaded even on failure: an exception
  // thrown by its code may still refer to it.
  // Where the library really is (a bare name is found along the search path).
  Dl_info where{};
  const std::string origin =
      dladdr(reinterpret_cast<void*>(entry_fn), &where) != 0 && where.dli_fname != nullptr
          ? std::filesystem::absolute(where.dli_fname).lexically_normal().string()
          : path;
  Library lib(entry->ns);
  try {
    entry->init(lib);
  } catch (const Error& e) {
    QK_THROW(ValueError, "loading extension library '", path, "': ", e.message());
  }
  LoadedLibrary info{origin, lib.ns(), detail::register_library(lib, origin)};
  loaded_by_handle().emplace(handle, info);
  QK_DEBUG("loaded extension {} ({} op(s)) from {}", info.ns, info.ops.size(), origin);
  return info;
}

size_t load_extensions_from_env() {
  const std::string list = env_extensions.lookup().value_or("");
  size_t n = 0;
  for (size_t start = 0; start <= list.size();) {
    size_t end = list.find(':', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) {
      try {
        load_library(list.substr(start, end - start));
      } catch (const IoError& e) {
        QK_THROW(IoError, "QK_EXTENSIONS: ", e.message());
      } catch (const ValueError& e) {
        QK_THROW(ValueError, "QK_EXTENSIONS: ", e.message());
      }
      ++n;
    }
    start = end + 1;
  }
  return n;
}

}  // namespace qk::plugin
