// docs/llm.md's flag tables are the status table (src/recipes/megatron_args_status.cc)
// written out: this test regenerates them and fails, with the text to paste,
// when the two differ.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "qk/base/file_io.h"
#include "qk/recipes/megatron_args.h"

namespace {

constexpr const char* kBegin =
    "<!-- BEGIN flag-status: generated; tests/recipes/gpt_pretrain_docs_test.cc checks it -->";
constexpr const char* kEnd = "<!-- END flag-status -->";

std::string cell(std::string s) {
  for (size_t p = s.find('|'); p != std::string::npos; p = s.find('|', p + 2)) s.replace(p, 1, "\\|");
  return s;
}

std::string flag_tables() {
  const auto flags = qk::recipes::megatron_flags();
  std::ostringstream os;
  // Supported, by Megatron's group.
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::string>> supported;
  for (const auto& f : flags) {
    if (f.status != qk::recipes::FlagStatus::kSupported) continue;
    if (!supported.count(f.group)) groups.push_back(f.group);
    std::ostringstream item;
    item << '`' << f.flag << '`' << (f.status_depends_on_value ? "\\*" : "");
    supported[f.group].push_back(item.str());
  }
  os << "**Supported** (\\* some values are refused: see the second table):\n\n| group | flags |\n| --- | --- |\n";
  for (const auto& g : groups) {
    os << "| " << g << " | ";
    for (size_t i = 0; i < supported[g].size(); ++i) os << (i ? ", " : "") << supported[g][i];
    os << " |\n";
  }
  os << "\n**Refused** with this message (a flag or value whose feature is not built yet):\n\n"
        "| flag | refusal |\n| --- | --- |\n";
  for (const auto& f : flags) {
    const bool partly = f.status == qk::recipes::FlagStatus::kSupported && f.status_depends_on_value;
    if (f.status != qk::recipes::FlagStatus::kNotYet && !partly) continue;
    os << "| `" << f.flag << "` | " << cell(f.status_text) << " |\n";
  }
  os << "\n**No-op** (accepted with one info line saying this):\n\n| flag | what it means here |\n| --- | --- |\n";
  for (const auto& f : flags)
    if (f.status == qk::recipes::FlagStatus::kNoop) os << "| `" << f.flag << "` | " << cell(f.status_text) << " |\n";
  return os.str();
}

TEST(GptPretrainDocs, FlagTablesInDocsLlmMdAreTheStatusTable) {
  const std::string path = std::string(QK_SOURCE_DIR) + "/docs/llm.md";
  ASSERT_TRUE(qk::file_exists(path)) << path;
  const std::string doc = qk::read_file(path);
  const size_t b = doc.find(kBegin), e = doc.find(kEnd);
  ASSERT_NE(b, std::string::npos) << "docs/llm.md lost its line: " << kBegin;
  ASSERT_NE(e, std::string::npos) << "docs/llm.md lost its line: " << kEnd;
  const std::string have = doc.substr(b + std::string(kBegin).size() + 1, e - b - std::string(kBegin).size() - 1);
  std::string want(1, '\n');  // (not "\n" + ...: GCC 12 misreports that as an overlapping copy)
  want += flag_tables() + "\n";
  if (have != want) {
    const std::string out = std::string(QK_BINARY_DIR) + "/docs_llm_flag_tables.md";
    qk::atomic_write_file(out, want);
    ADD_FAILURE() << "docs/llm.md's flag tables differ from the status table; put the contents of " << out
                  << " between its BEGIN and END lines";
  }
}

}  // namespace
