// GPT-2 ids must equal js-tiktoken's gpt2 encoding on a large varied text.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "common/reference_tool.h"
#include "data/test_util.h"
#include "qk/base/file_io.h"
#include "qk/data/text_gen.h"
#include "qk/data/tokenizer.h"

namespace {

std::string run(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return "popen failed";
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = ::pclose(f);
  if (rc != 0) out = "exit status " + std::to_string(rc) + ": " + out;
  return out;
}

std::unique_ptr<qk::data::Tokenizer> gpt2() {
  return qk::data::load_tokenizer({.type = "GPT2BPETokenizer",
                                   .vocab_file = qk::test::gpt2_vocab_json(),
                                   .merge_file = qk::test::gpt2_merges_txt()});
}

TEST(TokenizerParity, Gpt2MatchesJsTiktokenOnOneMegabyteOfVariedText) {
  QK_SKIP_WITHOUT_GPT2();
  if (!qk::file_exists(qk::test::npm_dir() + "/js-tiktoken/package.json"))
    QK_MISSING_REFERENCE_TOOL("js-tiktoken not installed under " + qk::test::npm_dir() +
                              "; run scripts/setup.sh");
  qk::test::TempDir dir("parity");
  const std::string text = qk::data::make_varied_text(1200 * 1024, 20240601);
  qk::atomic_write_file(dir / "text.txt", text);
  const std::string out = run("node '" QK_SOURCE_DIR "/tests/data/scripts/js_encode.cjs' '" +
                              qk::test::npm_dir() + "' js-tiktoken '" + (dir / "text.txt") +
                              "' '" + (dir / "ids.bin") + "'");
  if (out.find("not found") != std::string::npos && !qk::file_exists(dir / "ids.bin"))
    QK_MISSING_REFERENCE_TOOL("node (Debian: nodejs, with npm): " + out);
  ASSERT_TRUE(out.empty()) << out;
  const std::string raw = qk::read_file(dir / "ids.bin");
  std::vector<int32_t> want(raw.size() / 4);
  std::memcpy(want.data(), raw.data(), want.size() * 4);

  auto tok = gpt2();
  std::vector<int32_t> got = tok->encode(text);
  ASSERT_GT(want.size(), 200000u);
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i != got.size() || i != want.size()) {
    // Show where the encodings part, as text around the first difference.
    std::vector<int32_t> before(got.begin() + std::max<ptrdiff_t>(0, i - 5), got.begin() + i);
    std::string ctx = tok->decode(before);
    std::string g, w;
    for (size_t k = i; k < std::min(i + 8, got.size()); ++k) g += std::to_string(got[k]) + " ";
    for (size_t k = i; k < std::min(i + 8, want.size()); ++k) w += std::to_string(want[k]) + " ";
    FAIL() << "first difference at id " << i << " of " << want.size() << " (after \"" << ctx
           << "\"): qk " << g << "vs js-tiktoken " << w;
  }
  // And decoding gives the text back byte for byte.
  EXPECT_EQ(tok->decode(got), text);
}

}  // namespace
