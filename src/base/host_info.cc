#include "qk/base/host_info.h"

#include <fstream>

namespace qk {

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    auto pos = line.find(':');
    if (pos == std::string::npos) continue;
    pos = line.find_first_not_of(" \t", pos + 1);
    return pos == std::string::npos ? std::string() : line.substr(pos);
  }
  return "";
}

}  // namespace qk
