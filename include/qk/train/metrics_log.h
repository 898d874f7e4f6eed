// The trainer's metrics file: one JSON object per line (JSONL), flushed per
// record, so `tail -f`, jq and pandas.read_json(lines=True) read it live.
//
//   qk::train::MetricsLog log("run/metrics.jsonl", /*resume_iteration=*/-1);   // fresh file
//   log.write("train", 10, {{"lm loss", 5.1}, {"learning rate", 3e-4}});
//   // {"kind":"train","iteration":10,"lm loss":5.1,"learning rate":0.0003}
//
// Reopened with the iteration a run resumed from, it keeps the records up
// to that iteration and drops the rest (what a killed run logged after its
// checkpoint is logged again by the resumed run). Non-finite values are
// written as null and read back as NaN.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace qk::train {

class MetricsLog {
 public:
  struct Record {
    std::string kind;  // "train", "valid", ...
    int64_t iteration = 0;
    std::map<std::string, double> values;
  };

  // resume_iteration < 0: start a new file.
  MetricsLog(std::string path, int64_t resume_iteration);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const std::string& kind, int64_t iteration, const std::map<std::string, double>& values);
  // Every record in the file, the kept old ones first.
  const std::vector<Record>& records() const { return records_; }
  const std::string& path() const { return path_; }

  // Parses a metrics file (IoError naming the line on a bad one).
  static std::vector<Record> read(const std::string& path);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<Record> records_;
};

}  // namespace qk::train
