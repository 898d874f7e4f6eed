// qk_op_harness: every op case on the CPU (checked against f64, contiguous
// twins and finite differences) and on each registered backend against the
// CPU. Exit status 0 when nothing failed, 1 on a failure (or, with
// --fail-on-missing, a missing kernel), 2 on a bad command line.
//
//   qk_op_harness                         # the CPU and every registered backend
//   qk_op_harness --device cuda           # only the CPU and cuda:0
//   qk_op_harness --loopback --filter '^softmax '
//   qk_op_harness --list                  # the case ids
#include <iostream>
#include <string>

#include "harness/loopback_backend.h"
#include "harness/op_harness.h"
#include "qk/base/error.h"
#include "qk/tensor/backend.h"

namespace {

const char* kUsage =
    "usage: qk_op_harness [--device DEV]... [--loopback] [--filter REGEX] [--list]\n"
    "                     [--no-gradients] [--no-gradcheck] [--no-cpu-checks]\n"
    "                     [--fail-on-missing] [--verbose]\n"
    "  --device DEV       compare DEV (cuda, cuda:1, privateuse1, ...) with the CPU; repeatable\n"
    "                     (default: one device of each registered non-CPU backend)\n"
    "  --loopback         register the loopback test device (privateuse1, CPU kernels)\n"
    "  --filter REGEX     only the cases whose id matches (ids: --list)\n"
    "  --list             print the case ids and exit\n"
    "  --no-gradients     forward outputs only\n"
    "  --no-gradcheck     no finite differences on the f64 cases\n"
    "  --no-cpu-checks    no f64 / contiguous-twin / finite-difference checks on the CPU\n"
    "  --fail-on-missing  exit 1 when a backend lacks a kernel a case needs\n"
    "  --verbose          print each case as it starts\n";

int usage_error(const std::string& what) {
  std::cerr << "qk_op_harness: " << what << "\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qk::harness;
  Options o;
  bool list = false, loopback = false, fail_on_missing = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--device") {
      const char* v = value();
      if (!v) return usage_error("--device needs a value");
      try {
        qk::Device d(v);
        if (d.is_cpu()) return usage_error("--device cpu: the CPU is the reference, always run");
        o.devices.push_back(d);
      } catch (const qk::Error& e) {
        return usage_error(e.what());
      }
    } else if (a == "--filter") {
      const char* v = value();
      if (!v) return usage_error("--filter needs a regular expression");
      o.filter = v;
    } else if (a == "--loopback") {
      loopback = true;
    } else if (a == "--list") {
      list = true;
    } else if (a == "--no-gradients") {
      o.gradients = false;
    } else if (a == "--no-gradcheck") {
      o.gradcheck = false;
    } else if (a == "--no-cpu-checks") {
      o.cpu_checks = false;
    } else if (a == "--fail-on-missing") {
      fail_on_missing = true;
    } else if (a == "--verbose") {
      o.verbose = true;
      o.log = &std::cerr;
    } else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else {
      return usage_error(qk::detail::str_cat("unknown argument '", a, "'"));
    }
  }
  if (loopback) install_loopback();
  for (const qk::Device& d : o.devices) {
    if (!qk::has_backend(d.type)) {
      std::string known = "cpu";
      for (const qk::Device& r : registered_devices()) known += qk::detail::str_cat(", ", r.str());
      return usage_error(qk::detail::str_cat("no backend for ", d.str(),
                                             " in this program (registered: ", known, ")"));
    }
    try {
      qk::check_device_usable(d);
    } catch (const qk::DeviceError& e) {
      return usage_error(e.message());
    }
  }
  std::vector<Case> cases = all_cases();
  if (list) {
    for (const Case& c : cases) std::cout << c.id() << "\n";
    return 0;
  }
  Report r;
  try {
    r = run(cases, o);
  } catch (const std::exception& e) {  // a bad --filter regex, say
    std::cerr << "qk_op_harness: " << e.what() << "\n";
    return 2;
  }
  print(std::cout, r);
  bool missing = false;
  for (const BackendReport& b : r.backends) missing = missing || b.missing > 0;
  return !r.ok() || (fail_on_missing && missing) ? 1 : 0;
}
