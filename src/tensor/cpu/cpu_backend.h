#pragma once

#include "qk/tensor/backend.h"

namespace qk::cpu {
Backend& cpu_backend();
}  // namespace qk::cpu
