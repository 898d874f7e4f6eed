// What this host is, for reports and for files that hold figures measured on
// one kind of machine (qccl's tuning file): the CPU's model name.
#pragma once

#include <string>

namespace qk {

// The "model name" line of /proc/cpuinfo ("AMD EPYC 9R14 ..."); "" where the
// kernel does not say (some ARM hosts).
std::string cpu_model_name();

}  // namespace qk
