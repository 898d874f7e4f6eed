// Runs a fuzz target without libFuzzer, so every build (GCC included) checks
// it: the seeds, then mutations of them (bit flips, byte sets, truncations,
// insertions, duplicated spans) from a fixed random seed.
//   idx_fuzz [--iterations N] [--seed S]
//   idx_fuzz --write-seeds DIR      # writes the seeds as the committed corpus
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "fuzz_target.h"
#include "qk/base/file_io.h"

int main(int argc, char** argv) {
  long iterations = 2000;
  unsigned seed = 1;
  const auto seeds = fuzz_seeds();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iterations") == 0) {
      iterations = std::atol(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--seed") == 0) {
      seed = static_cast<unsigned>(std::atol(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--write-seeds") == 0) {
      qk::make_dirs(argv[i + 1]);
      for (size_t k = 0; k < seeds.size(); ++k)
        qk::atomic_write_file(std::string(argv[i + 1]) + "/seed" + std::to_string(k), seeds[k]);
      std::printf("wrote %zu seeds to %s\n", seeds.size(), argv[i + 1]);
      return 0;
    }
  }
  for (const auto& s : seeds) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  for (long it = 0; it < iterations; ++it) {
    std::string s = seeds[pick(seeds.size())];
    const int edits = 1 + static_cast<int>(pick(4));
    for (int e = 0; e < edits; ++e) {
      switch (pick(5)) {
        case 0: if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 << pick(8)); break;
        case 1: if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng()); break;
        case 2: s.resize(pick(s.size() + 1)); break;
        case 3: s.insert(pick(s.size() + 1), 1 + pick(8), static_cast<char>(rng())); break;
        case 4: if (!s.empty()) { size_t a = pick(s.size()); s.insert(pick(s.size() + 1), s.substr(a, pick(32))); } break;
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::printf("replay driver: %zu seeds and %ld mutated inputs, no crash\n", seeds.size(), iterations);
  return 0;
}
