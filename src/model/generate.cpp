// Greedy generation, teacher-forced replay and the per-position JSONL records they produce.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "core/version.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/limits.hpp"
#include "model/model.hpp"

namespace qc {

PositionRecord top2(const float* logits, int64_t vocab) {
  QC_CHECK(vocab >= 2, "top2 needs at least two logits, found {}", vocab);
  // Strict `>` keeps the lowest id on ties (run.c's `sample_argmax`); a NaN never compares greater.
  int64_t best = -1, second = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[best]) {
      second = best;
      best = i;
    } else if (second < 0 || logits[i] > logits[second]) {
      second = i;
    }
  }
  QC_CHECK(best >= 0 && second >= 0, "top2: fewer than two non-NaN logits in a row of {}", vocab);
  PositionRecord r;
  r.top1_id = static_cast<int32_t>(best);
  r.top2_id = static_cast<int32_t>(second);
  r.top1_logit = logits[best];
  r.top2_logit = logits[second];
  r.margin = r.top1_logit - r.top2_logit;
  return r;
}

namespace {
// fmt prints a float as the shortest decimal that reads back to the same float.
std::string json_float(float v) { return std::isfinite(v) ? fmt::format("{}", v) : std::string("null"); }
}  // namespace

std::string format_record(const PositionRecord& r) {
  return fmt::format(
      "{{\"prompt\": {}, \"position\": {}, \"token\": {}, \"top1_id\": {}, \"top1_logit\": {}, \"top2_id\": {}, "
      "\"top2_logit\": {}, \"margin\": {}}}",
      r.prompt.dump(), r.position, r.token, r.top1_id, json_float(r.top1_logit), r.top2_id, json_float(r.top2_logit),
      json_float(r.margin));
}

std::string format_header(std::string_view verb, LinearMode mode, std::string_view arm, const Model& model,
                          const std::string& tokenizer_path, const std::string& tokenizer_sha256,
                          const nlohmann::json& extra) {
  nlohmann::json h = nlohmann::json::object();
  h["kind"] = "header";
  h["mode"] = verb;
  h["linear_mode"] = to_string(mode);
  h["arm"] = arm.empty() ? std::string(to_string(mode)) : std::string(arm);
  h["model"] = model.source;
  h["model_sha256"] = model.sha256;
  h["tokenizer"] = tokenizer_path;
  h["tokenizer_sha256"] = tokenizer_sha256;
  h["qconform_version"] = version();
  for (const auto& [k, v] : extra.items()) h[k] = v;
  return h.dump();
}

GenerateResult generate_greedy(Decoder& decoder, std::span<const int32_t> prompt, int64_t max_new,
                               const nlohmann::json& prompt_id) {
  const ModelConfig& c = decoder.model().config;
  QC_INPUT(!prompt.empty(), "prompt {}: expected at least one token (BOS)", prompt_id.dump());
  QC_INPUT(static_cast<int64_t>(prompt.size()) <= c.max_seq_len,
           "prompt {}: {} tokens, more than the model's max_seq_len {}", prompt_id.dump(), prompt.size(),
           c.max_seq_len);
  GenerateResult out;
  out.tokens.assign(prompt.begin(), prompt.end());
  out.n_prompt = static_cast<int64_t>(prompt.size());
  decoder.reset();
  std::vector<float> logits;
  decoder.forward(prompt, LogitRows::last, logits);  // prefill
  for (int64_t step = 0; step < max_new; ++step) {
    PositionRecord r = top2(logits.data(), c.vocab);
    r.prompt = prompt_id;
    r.position = static_cast<int64_t>(out.tokens.size()) - 1;
    r.token = r.top1_id;
    out.records.push_back(r);
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
    out.tokens.push_back(r.token);
    const bool stop = std::find(c.stop_ids.begin(), c.stop_ids.end(), r.token) != c.stop_ids.end();
    if (stop || static_cast<int64_t>(out.tokens.size()) >= c.max_seq_len || step + 1 == max_new) break;
    const int32_t next[1] = {r.token};
    decoder.forward(next, LogitRows::last, logits);  // decode one token with the KV cache
  }
  return out;
}

std::vector<PositionRecord> replay(Decoder& decoder, std::span<const int32_t> tokens, const nlohmann::json& prompt_id,
                                   std::vector<float>* logits_out) {
  const int64_t vocab = decoder.model().config.vocab;
  QC_INPUT(tokens.size() >= 2, "replay of prompt {}: expected at least 2 tokens, found {}", prompt_id.dump(),
           tokens.size());
  decoder.reset();
  std::vector<float> logits;
  // The last token is only ever a target, never a context.
  decoder.forward(tokens.first(tokens.size() - 1), LogitRows::all, logits);
  std::vector<PositionRecord> records;
  for (size_t p = 0; p + 1 < tokens.size(); ++p) {
    PositionRecord r = top2(logits.data() + static_cast<int64_t>(p) * vocab, vocab);
    r.prompt = prompt_id;
    r.position = static_cast<int64_t>(p);
    r.token = tokens[p + 1];
    records.push_back(r);
  }
  if (logits_out) *logits_out = std::move(logits);
  return records;
}

PrefillDecodeComparison compare_prefill_decode(Decoder& decoder, const GenerateResult& g) {
  const int64_t vocab = decoder.model().config.vocab;
  PrefillDecodeComparison cmp;
  if (g.records.empty()) return cmp;
  std::vector<float> prefill;
  replay(decoder, g.tokens, g.records.front().prompt, &prefill);
  for (size_t i = 0; i < g.records.size(); ++i) {
    const int64_t pos = g.records[i].position;
    const float* a = g.logits.data() + static_cast<int64_t>(i) * vocab;
    const float* b = prefill.data() + pos * vocab;
    if (top2(b, vocab).top1_id != g.records[i].top1_id) {
      ++cmp.top1_disagreements;
      cmp.disagreeing_positions.push_back(pos);
    }
    for (int64_t j = 0; j < vocab; ++j) {
      const double d = std::fabs(static_cast<double>(a[j]) - b[j]);
      // NaN in either makes the difference infinite: it must never look like agreement.
      cmp.max_abs_diff = std::max(cmp.max_abs_diff, std::isnan(d) ? INFINITY : d);
      if (std::memcmp(&a[j], &b[j], sizeof(float)) != 0) ++cmp.bitwise_different;
    }
    ++cmp.positions;
  }
  return cmp;
}

std::vector<TokenSequence> read_token_sequences(const std::string& path, int64_t vocab, size_t min_tokens) {
  std::istringstream in(read_file(path));
  std::vector<TokenSequence> out;
  std::map<std::string, int64_t> first_line;  // prompt id (JSON text) -> line that defined it
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    check_json_depth(line, fmt::format("{}:{}", path, lineno));
    nlohmann::json obj;
    try {
      obj = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      QC_FAIL_INPUT("{}:{}: expected a JSON object, found invalid JSON ({})", path, lineno, e.what());
    }
    QC_INPUT(obj.is_object(), "{}:{}: expected a JSON object, found {}", path, lineno, obj.type_name());
    if (obj.contains("kind") && obj["kind"] == "header") continue;
    QC_INPUT(obj.contains("prompt") && (obj["prompt"].is_string() || obj["prompt"].is_number_integer()),
             "{}:{}: field `prompt`: expected a string or an integer", path, lineno);
    QC_INPUT(obj.contains("tokens") && obj["tokens"].is_array(), "{}:{}: field `tokens`: expected an array of ids",
             path, lineno);
    // Records are keyed by prompt id downstream (transfer pairs prompts by id): a repeated id
    // would silently merge two sequences.
    const auto [dup, fresh] = first_line.try_emplace(obj["prompt"].dump(), lineno);
    QC_INPUT(fresh, "{}:{}: field `prompt`: expected a unique prompt id, found {} again (first at line {})", path,
             lineno, printable_text(obj["prompt"].dump()), dup->second);
    TokenSequence s{obj["prompt"], {}};
    for (const auto& t : obj["tokens"]) {
      QC_INPUT(t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() < vocab,
               "{}:{}: field `tokens`: expected ids in [0, {}), found {}", path, lineno, vocab,
               printable_text(t.dump(), 60));
      s.tokens.push_back(t.get<int32_t>());
    }
    QC_INPUT(s.tokens.size() >= min_tokens, "{}:{}: field `tokens`: expected at least {} ids, found {}", path, lineno,
             min_tokens, s.tokens.size());
    out.push_back(std::move(s));
  }
  QC_INPUT(!out.empty(), "{}: expected at least one {{\"prompt\", \"tokens\"}} line, found none", path);
  return out;
}

}  // namespace qc
