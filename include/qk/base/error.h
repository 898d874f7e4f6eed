// Errors: one exception hierarchy for user mistakes, one assert for our bugs.
//
//   QK_CHECK(a.dim() == 2, "matmul: expected a 2-D tensor, got shape ", a.shape());
//   QK_CHECK_TYPE(a.dtype() == b.dtype(), "add: dtypes differ: ", a.dtype(), " vs ", b.dtype());
//   QK_INTERNAL_ASSERT(offset >= 0);   // a broken invariant of ours, not the user's
//
// Every message says what was expected, what was found and, where it helps,
// what to do; the file and line are appended so a report points at the check.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace qk {

// Base of every qianka exception. what() holds the message and "(at file:line)".
class Error : public std::runtime_error {
 public:
  Error(std::string msg, const char* file, int line);
  // The message without the location.
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string message_;
  const char* file_;
  int line_;
};

// Wrong values: shapes, ranges, flags.
class ValueError : public Error { using Error::Error; };
// A job's layout (parallel or batch sizes) does not fit its number of ranks,
// e.g. after an elastic restart on fewer nodes. qk exits with
// kExitWorldSizeRefused for it, and `qk run` ends the job instead of
// restarting it into the same refusal.
class WorldSizeError : public ValueError { using ValueError::ValueError; };
inline constexpr int kExitWorldSizeRefused = 78;  // sysexits.h's EX_CONFIG
// Wrong dtype for an operation.
class TypeError : public Error { using Error::Error; };
// Tensors on different devices, or an unavailable device.
class DeviceError : public Error { using Error::Error; };
// A device (GPU) could not give the memory asked for, even after releasing its cache.
class OutOfMemoryError : public DeviceError { using DeviceError::DeviceError; };
// Index out of range.
class IndexError : public Error { using Error::Error; };
// Files, sockets, system calls.
class IoError : public Error { using Error::Error; };
// A deadline passed.
class TimeoutError : public Error { using Error::Error; };
// An invariant of ours broke: a bug in qianka, not in the caller's use of it.
class InternalError : public Error { using Error::Error; };

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  if constexpr (sizeof...(Args) == 0) {
    return std::string();
  } else {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
  }
}
template <typename E>
[[noreturn]] void throw_error(const char* file, int line, std::string msg) {
  throw E(std::move(msg), file, line);
}
// Formats errno as "<strerror> (errno N)".
std::string errno_string(int err);
}  // namespace detail

}  // namespace qk

#define QK_CHECK_AS(EXC, cond, ...)                                                  \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::qk::detail::throw_error<EXC>(__FILE__, __LINE__,                             \
                                     ::qk::detail::str_cat(__VA_ARGS__));            \
  } while (0)

#define QK_CHECK(cond, ...) QK_CHECK_AS(::qk::ValueError, cond, __VA_ARGS__)
#define QK_CHECK_TYPE(cond, ...) QK_CHECK_AS(::qk::TypeError, cond, __VA_ARGS__)
#define QK_CHECK_DEVICE(cond, ...) QK_CHECK_AS(::qk::DeviceError, cond, __VA_ARGS__)
#define QK_CHECK_INDEX(cond, ...) QK_CHECK_AS(::qk::IndexError, cond, __VA_ARGS__)
#define QK_THROW(EXC, ...) \
  ::qk::detail::throw_error<EXC>(__FILE__, __LINE__, ::qk::detail::str_cat(__VA_ARGS__))

#define QK_INTERNAL_ASSERT(cond, ...)                                                \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::qk::detail::throw_error<::qk::InternalError>(                                \
          __FILE__, __LINE__,                                                        \
          ::qk::detail::str_cat("internal assert failed: " #cond ". ", ##__VA_ARGS__, \
                                " This is a qianka bug; please report it."));       \
  } while (0)

// Checks a POSIX call that returns -1 and sets errno; retries on EINTR.
#define QK_SYSCALL(call, ...)                                                        \
  ({                                                                                 \
    decltype(call) qk_rc_;                                                           \
    do { qk_rc_ = (call); } while (qk_rc_ == -1 && errno == EINTR);                  \
    if (qk_rc_ == -1) [[unlikely]]                                                   \
      ::qk::detail::throw_error<::qk::IoError>(                                      \
          __FILE__, __LINE__,                                                        \
          ::qk::detail::str_cat(#call " failed: ", ::qk::detail::errno_string(errno), \
                                ##__VA_ARGS__));                                     \
    qk_rc_;                                                                          \
  })
