#include "qk/train/metrics_log.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "qk/base/error.h"
#include "qk/base/file_io.h"

namespace qk::train {

namespace {

using nlohmann::json;

std::string line_of(const MetricsLog::Record& r) {
  json j;
  j["kind"] = r.kind;
  j["iteration"] = r.iteration;
  for (const auto& [k, v] : r.values) {
    if (std::isfinite(v)) j[k] = v;
    else j[k] = nullptr;
  }
  return j.dump() + "\n";
}

}  // namespace

std::vector<MetricsLog::Record> MetricsLog::read(const std::string& path) {
  std::vector<Record> out;
  std::istringstream in(read_file(path));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      const json j = json::parse(line);
      Record r;
      r.kind = j.at("kind").get<std::string>();
      r.iteration = j.at("iteration").get<int64_t>();
      for (const auto& [k, v] : j.items()) {
        if (k == "kind" || k == "iteration") continue;
        r.values[k] = v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
      }
      out.push_back(std::move(r));
    } catch (const json::exception& e) {
      QK_THROW(IoError, "Metrics file '", path, "' line ", n, " is not a metrics record: ", e.what());
    }
  }
  return out;
}

MetricsLog::MetricsLog(std::string path, int64_t resume_iteration) : path_(std::move(path)) {
  QK_CHECK_AS(ValueError, !path_.empty(), "MetricsLog: empty path");
  std::string kept;
  if (resume_iteration >= 0 && file_exists(path_)) {
    for (Record& r : read(path_)) {
      if (r.iteration > resume_iteration) continue;
      kept += line_of(r);
      records_.push_back(std::move(r));
    }
  }
  atomic_write_file(path_, kept);
  file_ = std::fopen(path_.c_str(), "a");
  QK_CHECK_AS(IoError, file_ != nullptr, "Cannot open metrics file '", path_, "' for appending");
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const std::string& kind, int64_t iteration, const std::map<std::string, double>& values) {
  Record r{kind, iteration, values};
  const std::string line = line_of(r);
  QK_CHECK_AS(IoError, std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
              "Cannot write to metrics file '", path_, "' (disk full?)");
  records_.push_back(std::move(r));
}

}  // namespace qk::train
