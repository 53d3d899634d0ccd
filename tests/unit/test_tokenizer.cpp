// The llama2.c tokenizer: loading tok512.bin, encode/decode round trips, the BPE against a
// second implementation written here, byte fallback, and malformed files.
//
// Run: ./build/tests/qconform_unit_tests --gtest_filter='Tokenizer*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "qconform/error.hpp"
#include "model/tokenizer.hpp"

namespace {

const std::string kTok = std::string(QC_SHARED_DIR) + "/models/stories260K/tok512.bin";
#define SKIP_WITHOUT_TOKENIZER()                                                              \
  do {                                                                                        \
    if (!std::filesystem::exists(kTok)) GTEST_SKIP() << kTok << " not found (shared model folder absent)"; \
  } while (0)

// A second BPE, written from the description rather than from run.c: split the text into UTF-8
// characters by their lead byte's length, map each to its piece or its bytes' <0xXX> pieces,
// then merge the best-scoring adjacent pair (leftmost among equals) on strings until none is
// in the vocabulary.
std::vector<int32_t> reference_encode(const qc::Tokenizer& t, const std::string& text) {
  std::map<std::string, int32_t> ids;  // lowest id for each piece
  for (int32_t i = static_cast<int32_t>(t.vocab_size()) - 1; i >= 0; --i) ids[t.piece(i)] = i;
  std::vector<std::string> syms;
  if (!text.empty()) syms.push_back(" ");
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    const std::string ch = text.substr(i, len);
    i += len;
    if (ids.count(ch)) {
      syms.push_back(ch);
    } else {
      for (unsigned char b : ch) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        syms.push_back(buf);
      }
    }
  }
  for (;;) {
    int best = -1;
    float best_score = 0;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      auto it = ids.find(syms[i] + syms[i + 1]);
      if (it != ids.end() && (best < 0 || t.score(it->second) > best_score)) {
        best = static_cast<int>(i);
        best_score = t.score(it->second);
      }
    }
    if (best < 0) break;
    syms[best] += syms[best + 1];
    syms.erase(syms.begin() + best + 1);
  }
  std::vector<int32_t> out = {1};
  for (const auto& s : syms) out.push_back(ids.at(s));
  return out;
}

const std::vector<std::string> kSamples = {
    "Once upon a time, there was a little girl named Lily.",
    "She said, \"I want to play with your ball!\"\nThe dog barked.",
    "  two  leading spaces and   gaps",
    "numbers 12345 and symbols #@%&*~",
    "caf\xc3\xa9 na\xc3\xafve \xe2\x98\x83 snowman \xf0\x9f\x98\x80 emoji",
    "tab\there",
    "x",
};

TEST(Tokenizer, LoadsTok512) {
  SKIP_WITHOUT_TOKENIZER();
  const auto t = qc::Tokenizer::load_llama2c(kTok, 512);
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.piece(0), "<unk>");
  EXPECT_EQ(t.piece(1), "\n<s>\n");
  EXPECT_EQ(t.piece(2), "\n</s>\n");
  EXPECT_EQ(t.piece(3), "<0x00>");
  EXPECT_EQ(t.piece(3 + 0x41), "<0x41>");
  EXPECT_GE(t.lookup(" "), 0) << "the dummy prefix piece";
  EXPECT_EQ(t.sha256.rfind("sha256:", 0), 0u);
  // Reading to the end of the file finds the same 512 tokens.
  EXPECT_EQ(qc::Tokenizer::load_llama2c(kTok).vocab_size(), 512);
}

TEST(Tokenizer, EncodeMatchesSecondImplementationAndRoundTrips) {
  SKIP_WITHOUT_TOKENIZER();
  const auto t = qc::Tokenizer::load_llama2c(kTok, 512);
  for (const std::string& text : kSamples) {
    const auto ids = t.encode(text, /*bos=*/true, /*eos=*/false);
    EXPECT_EQ(ids, reference_encode(t, text)) << "text: " << text;
    EXPECT_EQ(t.decode(ids), text) << "round trip";
    // Termination: no adjacent pair of the result is itself a piece.
    for (size_t i = 1; i + 1 < ids.size(); ++i)
      EXPECT_EQ(t.lookup(t.piece(ids[i]) + t.piece(ids[i + 1])), -1) << text << " at " << i;
    if (text.size() > 5) EXPECT_LT(ids.size(), text.size() + 2) << "BPE merged nothing in: " << text;
  }
  // The common words of the stories are single tokens after merging.
  const auto once = t.encode("Once", true, false);
  ASSERT_EQ(once.size(), 2u);
  EXPECT_EQ(t.piece(once[1]), " Once");
}

TEST(Tokenizer, BosEosEmptyTextAndByteFallback) {
  SKIP_WITHOUT_TOKENIZER();
  const auto t = qc::Tokenizer::load_llama2c(kTok, 512);
  EXPECT_EQ(t.encode("", true, false), std::vector<int32_t>{1});
  EXPECT_EQ(t.encode("", true, true), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(t.encode("", false, false).empty());
  const auto no_bos = t.encode("hello", false, true);
  EXPECT_EQ(no_bos.back(), 2);
  EXPECT_NE(no_bos.front(), 1);
  // Without BOS the dummy prefix space survives decoding, as in run.c.
  EXPECT_EQ(t.decode(t.encode("hello", false, false)), " hello");
  // A character outside the 512 pieces falls back to its bytes, ids byte+3.
  const auto snow = t.encode("\xe2\x98\x83", true, false);
  EXPECT_EQ(snow, (std::vector<int32_t>{1, t.lookup(" "), 0xE2 + 3, 0x98 + 3, 0x83 + 3}));
  EXPECT_EQ(t.decode_piece(5, 0x41 + 3), "A");
  EXPECT_EQ(t.decode_piece(1, t.lookup(" Once")), "Once") << "leading space stripped after BOS";
  EXPECT_EQ(t.decode_piece(5, t.lookup(" Once")), " Once");
  EXPECT_THROW(t.piece(512), qc::Error);
}

TEST(Tokenizer, InMemoryBpePrefersHigherScoresAndLeftmostTies) {
  // Pieces: <unk> <s> </s>, 256 byte pieces, then a small vocabulary with chosen scores.
  std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    pieces.push_back(buf);
    scores.push_back(0);
  }
  for (auto [p, s] : std::vector<std::pair<std::string, float>>{{" ", -1}, {"a", -1}, {"b", -1}, {"ab", -5}, {"ba", -2}, {" a", -9}, {"aba", -1}}) {
    pieces.push_back(p);
    scores.push_back(s);
  }
  const qc::Tokenizer t(pieces, scores, 3);
  // "abab" -> [" ", a, b, a, b]; the best pair is "ba" (-2, not "ab" at -5) -> [" ", a, ba, b];
  // then "aba" (-1) beats " a" (-9) -> [" ", aba, b]; nothing else is a piece.
  const auto ids = t.encode("abab", false, false);
  std::vector<std::string> got;
  for (int32_t id : ids) got.push_back(t.piece(id));
  EXPECT_EQ(got, (std::vector<std::string>{" ", "aba", "b"}));
  const auto ref = reference_encode(t, "abab");  // BOS first
  EXPECT_EQ(ids, std::vector<int32_t>(ref.begin() + 1, ref.end()));
}

std::string write_temp(const std::string& name, const std::vector<uint8_t>& bytes) {
  const auto path = (std::filesystem::temp_directory_path() / ("qc_test_tok_" + std::to_string(::getpid()) + name)).string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return path;
}

void expect_tok_error(const std::vector<uint8_t>& bytes, int64_t vocab, const std::vector<std::string>& needles) {
  const std::string path = write_temp("bad.bin", bytes);
  try {
    qc::Tokenizer::load_llama2c(path, vocab);
    ADD_FAILURE() << "no error; expected " << needles[0];
  } catch (const qc::Error& e) {
    EXPECT_EQ(e.kind(), qc::ErrorKind::input);
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing `" << n << "` in: " << what;
  }
  std::filesystem::remove(path);
}

TEST(Tokenizer, MalformedFilesAreClearInputErrors) {
  SKIP_WITHOUT_TOKENIZER();
  std::ifstream in(kTok, std::ios::binary);
  const std::vector<uint8_t> good{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  auto cut = good;
  cut.resize(good.size() - 3);
  expect_tok_error(cut, 512, {"token 511", "too short"});
  expect_tok_error(good, 500, {"left after 500 tokens", "do not match"});
  expect_tok_error(good, 600, {"token 512", "too short", "vocab_size 600"});
  auto bad_len = good;
  const int32_t neg = -4;
  std::memcpy(bad_len.data() + 8, &neg, 4);  // token 0's len
  expect_tok_error(bad_len, 512, {"`len` of token 0", "-4"});
  expect_tok_error({1, 0}, 512, {"max_token_length"});
}

}  // namespace
