#include "cli/check_sections.h"

#include <fmt/format.h>

namespace qk::cli {

void print_build_config() {
  fmt::print("\nBuild\n");
#ifdef QK_HAVE_DNNL
  fmt::print("  oneDNN:        yes\n");
#else
  fmt::print("  oneDNN:        no\n");
#endif
#ifdef QK_HAVE_MPI
  fmt::print("  MPI:           yes\n");
#else
  fmt::print("  MPI:           no\n");
#endif
#ifdef QK_HAVE_CUDA
  fmt::print("  CUDA:          yes\n");
#else
  fmt::print("  CUDA:          no (toolkit not found at build time)\n");
#endif
}

void print_accelerators() { fmt::print("  accelerators:  none\n"); }

void run_self_tests(int64_t) {}

}  // namespace qk::cli
