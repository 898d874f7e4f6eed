#include "qk/base/error.h"

#include <cstring>

namespace qk {

namespace {
std::string with_location(const std::string& msg, const char* file, int line) {
  // Strip the build tree prefix: "src/tensor/..." reads better than an absolute path.
  std::string_view f(file ? file : "?");
  for (const char* root : {"/src/", "/include/", "/tests/", "/bench/"}) {
    auto pos = f.rfind(root);
    if (pos != std::string_view::npos) {
      f.remove_prefix(pos + 1);
      break;
    }
  }
  return msg + " (at " + std::string(f) + ":" + std::to_string(line) + ")";
}
}  // namespace

Error::Error(std::string msg, const char* file, int line)
    : std::runtime_error(with_location(msg, file, line)),
      message_(std::move(msg)),
      file_(file),
      line_(line) {}

namespace detail {
std::string errno_string(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer.
  const char* s = strerror_r(err, buf, sizeof buf);
  return std::string(s) + " (errno " + std::to_string(err) + ")";
}
}  // namespace detail

}  // namespace qk
