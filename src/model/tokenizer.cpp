// The llama2.c tokenizer, after run.c's `build_tokenizer`, `encode` and `decode`
// (github.com/karpathy/llama2.c, MIT).
#include "model/tokenizer.hpp"

#include <cstring>
#include <fstream>
#include <iterator>

#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/sha256.hpp"

namespace qc {

Tokenizer::Tokenizer(std::vector<std::string> pieces, std::vector<float> scores, int32_t max_token_length)
    : pieces_(std::move(pieces)), scores_(std::move(scores)), max_token_length_(max_token_length) {
  QC_CHECK(pieces_.size() == scores_.size(), "{} pieces but {} scores", pieces_.size(), scores_.size());
  for (size_t i = 0; i < pieces_.size(); ++i) index_.emplace(pieces_[i], static_cast<int32_t>(i));  // first id wins
}

Tokenizer Tokenizer::load_llama2c(const std::string& path, int64_t vocab_size) {
  const std::string text = read_file(path);  // refuses FIFOs, devices and directories without blocking
  const std::vector<uint8_t> bytes(text.begin(), text.end());
  size_t off = 0;
  auto read_i32 = [&](const char* field, int64_t token) {
    QC_INPUT(off + 4 <= bytes.size(), "{}: tokenizer field `{}` of token {}: expected 4 bytes at offset {}, the file "
             "has {} (file too short{})", path, field, token, off, bytes.size(),
             vocab_size >= 0 ? fmt::format(" for vocab_size {}", vocab_size) : std::string());
    int32_t v;
    std::memcpy(&v, bytes.data() + off, 4);
    off += 4;
    return v;
  };
  QC_INPUT(bytes.size() >= 4, "{}: tokenizer field `max_token_length`: expected 4 bytes, the file has {}", path,
           bytes.size());
  const int32_t max_len = read_i32("max_token_length", -1);
  QC_INPUT(max_len > 0, "{}: tokenizer field `max_token_length`: expected > 0, found {}", path, max_len);
  std::vector<std::string> pieces;
  std::vector<float> scores;
  for (int64_t i = 0; vocab_size < 0 ? off < bytes.size() : i < vocab_size; ++i) {
    const int32_t score_bits = read_i32("score", i);
    float score;
    std::memcpy(&score, &score_bits, 4);
    const int32_t len = read_i32("len", i);
    QC_INPUT(len >= 0 && len <= max_len, "{}: tokenizer field `len` of token {}: expected 0 .. max_token_length = {}, "
             "found {}", path, i, max_len, len);
    QC_INPUT(off + static_cast<size_t>(len) <= bytes.size(), "{}: tokenizer piece of token {}: expected {} bytes at "
             "offset {}, the file has {} (file too short)", path, i, len, off, bytes.size());
    pieces.emplace_back(reinterpret_cast<const char*>(bytes.data() + off), static_cast<size_t>(len));
    scores.push_back(score);
    off += static_cast<size_t>(len);
  }
  QC_INPUT(off == bytes.size(), "{}: tokenizer: {} bytes left after {} tokens (the model's vocab_size is {}): "
           "tokenizer and model do not match", path, bytes.size() - off, pieces.size(), vocab_size);
  Tokenizer t(std::move(pieces), std::move(scores), max_len);
  t.source = path;
  t.sha256 = sha256_digest(std::as_bytes(std::span(bytes)));
  return t;
}

const std::string& Tokenizer::piece(int32_t id) const {
  QC_INPUT(id >= 0 && id < vocab_size(), "token id {}: expected in [0, {}) of tokenizer {}", id, vocab_size(), source);
  return pieces_[static_cast<size_t>(id)];
}

float Tokenizer::score(int32_t id) const {
  piece(id);  // range check
  return scores_[static_cast<size_t>(id)];
}

int32_t Tokenizer::lookup(std::string_view piece) const {
  const auto it = index_.find(std::string(piece));
  return it == index_.end() ? -1 : it->second;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int32_t> tokens;
  if (bos) tokens.push_back(kBos);
  // sentencepiece's add_dummy_prefix: a " " token first, but only for non-empty text.
  if (!text.empty()) {
    const int32_t dummy = lookup(" ");
    QC_INPUT(dummy >= 0, "tokenizer {}: no \" \" piece for the dummy prefix", source);
    tokens.push_back(dummy);
  }
  // One code point at a time: a UTF-8 lead byte starts a new buffer; continuation bytes join
  // it until the next byte is not a continuation or the buffer holds 4 bytes.
  std::string buf;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) buf.clear();
    buf.push_back(static_cast<char>(c));
    const bool next_continues = i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80;
    if (next_continues && buf.size() < 4) continue;
    const int32_t id = lookup(buf);
    if (id >= 0) {
      tokens.push_back(id);
    } else {
      // Byte fallback: <0xXX> is token XX + 3 (after <unk>, <s>, </s>).
      for (unsigned char b : buf) {
        QC_INPUT(b + 3 < vocab_size(), "tokenizer {}: byte fallback needs token {}, the vocab has {}", source, b + 3,
                 vocab_size());
        tokens.push_back(static_cast<int32_t>(b) + 3);
      }
    }
    buf.clear();
  }
  // Merge the adjacent pair whose concatenation is the best-scoring piece until none is a piece.
  while (true) {
    float best_score = -1e10f;
    int32_t best_id = -1;
    size_t best_idx = 0;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      const int32_t id = lookup(pieces_[static_cast<size_t>(tokens[i])] + pieces_[static_cast<size_t>(tokens[i + 1])]);
      if (id != -1 && scores_[static_cast<size_t>(id)] > best_score) {
        best_score = scores_[static_cast<size_t>(id)];
        best_id = id;
        best_idx = i;
      }
    }
    if (best_id == -1) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_idx) + 1);
  }
  if (eos) tokens.push_back(kEos);
  return tokens;
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string Tokenizer::decode_piece(int32_t prev_token, int32_t token) const {
  std::string_view p = piece(token);
  // After BOS, sentencepiece's decoder strips the leading space (llama2.c PR #89).
  if (prev_token == kBos && !p.empty() && p[0] == ' ') p.remove_prefix(1);
  // Raw-byte pieces look like "<0x0A>".
  if (p.size() == 6 && p.substr(0, 3) == "<0x" && p[5] == '>' && hex_value(p[3]) >= 0 && hex_value(p[4]) >= 0) {
    return std::string(1, static_cast<char>(hex_value(p[3]) * 16 + hex_value(p[4])));
  }
  return std::string(p);
}

std::string Tokenizer::decode(std::span<const int32_t> tokens) const {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i == 0 && tokens[0] == kBos) continue;
    out += decode_piece(i == 0 ? -1 : tokens[i - 1], tokens[i]);
  }
  return out;
}

}  // namespace qc
