// An output file qk md appends whole records to (a trajectory or energy frame): each write() is flushed,
// so a killed run leaves whole frames, and a resumed run reopens it cut back to the size a checkpoint
// recorded. Shared by TrrWriter, XtcWriter and EdrWriter.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

namespace qk::md {

class OutputFile {
 public:
  // Creates (truncates) path; with keep_bytes keeps the file's first keep_bytes bytes and appends after them
  // (an error naming the file when it is missing or shorter).
  OutputFile(const std::string& path, std::optional<uint64_t> keep_bytes);
  void write(std::string_view record);
  uint64_t bytes() const { return bytes_; }  // the file's size after the last write
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
  uint64_t bytes_ = 0;
};

}  // namespace qk::md
