// Plugins built with qk_add_extension (tests/plugin/plugins): loading one,
// calling its ops with autograd, QK_EXTENSIONS, and each way loading fails.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "qk/autograd/gradcheck.h"
#include "qk/base/version.h"
#include "qk/plugin/registry.h"
#include "qk/tensor/generator.h"

namespace {
using namespace qk;

std::string plugin_path(const std::string& name) {
  return std::string(QK_TEST_PLUGIN_DIR) + "/libqk_test_" + name + ".so";
}

std::string load_error(const std::string& path) {
  try {
    plugin::load_library(path);
  } catch (const Error& e) {
    return e.message();
  }
  return "(loaded)";
}

TEST(Loader, LoadsAPluginAndCallsItsOps) {
  plugin::LoadedLibrary lib = plugin::load_library(plugin_path("good_ops"));
  EXPECT_EQ(lib.ns, "test_ext");
  EXPECT_EQ(lib.ops, (std::vector<std::string>{"test_ext::scale", "test_ext::plus_minus"}));
  const plugin::OpDef& op = plugin::find_op("test_ext::scale");
  EXPECT_EQ(op.origin, lib.path);
  EXPECT_EQ(op.kernel_devices(), "cpu");
  Tensor x = from_vector<double>({1, -2, 3}, {3}).requires_grad_();
  EXPECT_EQ(plugin::call("test_ext::scale", {x}).to_vector<double>(), (std::vector<double>{2, -4, 6}));
  auto scale = plugin::typed<Tensor(const Tensor&, double)>("test_ext::scale");
  EXPECT_EQ(scale(x, -1.0).to_vector<double>(), (std::vector<double>{-1, 2, -3}));
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return scale(in[0], 3.0).sum(); },
                               {randn({4, 2}, DType::f64).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.message;
  auto [plus, minus] = plugin::typed<std::tuple<Tensor, Tensor>(const Tensor&)>("test_ext::plus_minus")(x);
  EXPECT_EQ(minus.to_vector<double>(), (std::vector<double>{0, -3, 2}));
  // Loading the same file again registers nothing new and is no error.
  EXPECT_EQ(plugin::load_library(plugin_path("good_ops")).ops, lib.ops);
  int copies = 0;
  for (const auto& l : plugin::loaded_libraries()) copies += l.path == lib.path;
  EXPECT_EQ(copies, 1);
}

TEST(Loader, QkExtensionsLoadsEachListedLibrary) {
  const std::string list = ":" + plugin_path("good_ops") + "::";
  ::setenv("QK_EXTENSIONS", list.c_str(), 1);
  EXPECT_EQ(plugin::load_extensions_from_env(), 1u);
  EXPECT_TRUE(plugin::has_op("test_ext::plus_minus"));
  ::setenv("QK_EXTENSIONS", "/no/such/libx.so", 1);
  try {
    plugin::load_extensions_from_env();
    FAIL() << "loaded a missing library";
  } catch (const IoError& e) {
    EXPECT_NE(e.message().find("QK_EXTENSIONS: extension library '/no/such/libx.so' not found"),
              std::string::npos) << e.message();
  }
  ::unsetenv("QK_EXTENSIONS");
  EXPECT_EQ(plugin::load_extensions_from_env(), 0u);
}

TEST(Loader, AMissingFileIsAnIoError) {
  EXPECT_THROW(plugin::load_library("/no/such/dir/libmy_ops.so"), IoError);
  std::string e = load_error("/no/such/dir/libmy_ops.so");
  EXPECT_NE(e.find("extension library '/no/such/dir/libmy_ops.so' not found: no such file"),
            std::string::npos) << e;
  // A bare name is searched for as dlopen does, and dlopen says why it failed.
  e = load_error("libqk_no_such_extension.so");
  EXPECT_NE(e.find("cannot load extension library 'libqk_no_such_extension.so': "), std::string::npos)
      << e;
}

TEST(Loader, ALibraryWithoutTheEntryPointIsNotAnExtension) {
  EXPECT_THROW(plugin::load_library(plugin_path("no_entry")), IoError);
  std::string e = load_error(plugin_path("no_entry"));
  EXPECT_NE(e.find("is not a qianka extension library: it exports no qk_extension_entry symbol"),
            std::string::npos) << e;
}

TEST(Loader, AnUnresolvedSymbolIsNamedDemangled) {
  std::string e = load_error(plugin_path("undefined_symbol"));
  EXPECT_NE(e.find("it needs 'qk::function_from_another_version(qk::Tensor const&)', which this "
                   "program does not provide"),
            std::string::npos) << e;
  EXPECT_NE(e.find("qk_enable_extensions()"), std::string::npos) << e;
  EXPECT_FALSE(plugin::has_op("test_undefined::f"));
}

TEST(Loader, APluginBuiltForAnotherAbiOrVersionIsRefused) {
  std::string e = load_error(plugin_path("abi_mismatch"));
  EXPECT_NE(e.find("was built for extension ABI 99 but this qianka"), std::string::npos) << e;
  EXPECT_NE(e.find("rebuild it against this installation"), std::string::npos) << e;
  e = load_error(plugin_path("version_mismatch"));
  EXPECT_NE(e.find("was built against qianka 0.0.1-other but this program is qianka " QK_VERSION_STRING),
            std::string::npos) << e;
}

TEST(Loader, TheSameOpFromTwoLibrariesIsRefusedNamingBoth) {
  plugin::load_library(plugin_path("good_ops"));
  std::string e = load_error(plugin_path("dup_ops"));
  EXPECT_NE(e.find("op test_ext::scale is registered twice: by "), std::string::npos) << e;
  EXPECT_NE(e.find("libqk_test_good_ops.so and again by "), std::string::npos) << e;
  EXPECT_NE(e.find("libqk_test_dup_ops.so"), std::string::npos) << e;
}

TEST(Loader, AFailingRegistrationRegistersNothing) {
  std::string e = load_error(plugin_path("init_throws"));
  EXPECT_NE(e.find("loading extension library '"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown type 'complex'"), std::string::npos) << e;
  EXPECT_FALSE(plugin::has_op("test_throws::fine"));
}

}  // namespace
