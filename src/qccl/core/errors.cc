#include "core/errors.h"

namespace qccl {

qcclResult_t result_of(const std::exception& e) {
  if (dynamic_cast<const RemoteError*>(&e)) return qcclRemoteError;
  if (dynamic_cast<const qk::TimeoutError*>(&e)) return qcclTimeout;
  if (dynamic_cast<const UsageError*>(&e)) return qcclInvalidUsage;
  if (dynamic_cast<const qk::InternalError*>(&e)) return qcclInternalError;
  if (dynamic_cast<const qk::IoError*>(&e)) return qcclSystemError;
  if (dynamic_cast<const qk::ValueError*>(&e) || dynamic_cast<const qk::TypeError*>(&e) ||
      dynamic_cast<const qk::IndexError*>(&e))
    return qcclInvalidArgument;
  if (dynamic_cast<const std::bad_alloc*>(&e)) return qcclSystemError;
  return qcclInternalError;
}

}  // namespace qccl
