// The topology preprocessor: GROMACS's cpp subset (include/qk/hpc/md/topology.h
// lists what it does). It yields the lines a directive parser sees, each with
// the file and line it came from, macros substituted and comments kept.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

namespace qk::md {

struct SourceLine {
  std::string text;
  const std::string* file;  // owned by the Preprocessor
  int line;
};

class Preprocessor {
 public:
  // defines: "NAME" or "NAME=VALUE"; include_dirs searched after the including file's folder.
  Preprocessor(std::vector<std::string> defines, std::vector<std::string> include_dirs);
  // All lines of `path` and what it includes, in order.
  std::vector<SourceLine> run(const std::string& path);

 private:
  void process_file(const std::string& path, int depth, std::vector<SourceLine>* out);
  std::string resolve_include(const std::string& name, const std::string& from, int line) const;
  std::string substitute(const std::string& text) const;

  std::map<std::string, std::string> macros_;
  std::vector<std::string> include_dirs_;
  std::deque<std::string> file_names_;  // stable addresses for SourceLine::file
};

}  // namespace qk::md
