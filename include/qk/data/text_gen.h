// Deterministic "varied text" for tokenizer parity tests and benchmarks:
// English prose with contractions, numbers, code, whitespace runs, CJK,
// Cyrillic, Arabic, Devanagari, emoji sequences, long unbroken runs and
// random code points from every plane, mixed in random order.
//
//   std::string text = qk::data::make_varied_text(1 << 20, /*seed=*/1);
//
// The output is valid UTF-8, has no surrogates and never contains special
// tokens such as "<|endoftext|>" (reference encoders refuse them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qk::data {

std::string make_varied_text(size_t bytes, uint64_t seed);

}  // namespace qk::data
