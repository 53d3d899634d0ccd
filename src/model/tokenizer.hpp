// The llama2.c tokenizer (`tokenizer.bin`, e.g. stories260K's `tok512.bin`) and its BPE,
// following llama2.c's run.c exactly (`build_tokenizer`, `encode`, `decode`).
//
// File layout (little-endian): int32 max_token_length, then per token: float32 score,
// int32 len, `len` bytes (the piece; sentencepiece's "▁" already replaced by " ").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qc {

class Tokenizer {
 public:
  // Reads `path`; `vocab_size` is the model's (the file does not store it). With
  // `vocab_size` < 0 the file is read to its end. QC_INPUT names the file, the token index
  // and the field when the file is short, a length is negative, or bytes are left over.
  static Tokenizer load_llama2c(const std::string& path, int64_t vocab_size = -1);
  // From pieces and scores in memory (tests).
  Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, int32_t max_token_length);

  int64_t vocab_size() const { return static_cast<int64_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const;
  float score(int32_t id) const;
  int32_t max_token_length() const { return max_token_length_; }
  static constexpr int32_t kBos = 1, kEos = 2;  // llama2.c: <unk>=0, <s>=1, </s>=2

  // run.c `encode`: optional BOS; a dummy-prefix " " token when `text` is not empty; one
  // token per UTF-8 code point (at most 4 bytes), or its bytes as <0xXX> tokens (id byte+3)
  // when the code point is not a piece; then repeatedly merge the adjacent pair whose
  // concatenation is the highest-scoring piece (leftmost on ties); optional EOS.
  std::vector<int32_t> encode(std::string_view text, bool bos, bool eos) const;
  // run.c `decode`: the piece of `token`, its leading space stripped after BOS, and <0xXX>
  // pieces turned into the raw byte.
  std::string decode_piece(int32_t prev_token, int32_t token) const;
  // The text of a sequence as run.c prints it: a leading BOS prints nothing; every other token
  // prints decode_piece(previous token, token).
  std::string decode(std::span<const int32_t> tokens) const;
  // Exact lookup of a piece (the lowest id when a piece appears twice); -1 when absent.
  int32_t lookup(std::string_view piece) const;

  std::string source;  // file path, empty for in-memory tokenizers
  std::string sha256;  // "sha256:<hex>" of the file

 private:
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  int32_t max_token_length_ = 0;
  std::unordered_map<std::string, int32_t> index_;
};

}  // namespace qc
