// SentencePiece models (Megatron's SentencePieceTokenizer) through Debian's
// libsentencepiece; see Note [Megatron SentencePiece ids] in
// sentencepiece_tokenizer.cc for the special ids.
#pragma once

#include <memory>
#include <string>

#include "qk/data/tokenizer.h"

namespace qk::data {

// Whether this build has libsentencepiece (found by pkg-config at configure
// time); without it load_sentencepiece throws a ValueError saying so.
bool sentencepiece_available();

// Loads an spm_train .model file.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model);

}  // namespace qk::data
