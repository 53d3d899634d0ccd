// `qconform replay`: teacher forcing. One prefill pass per sequence scores every position; one
// JSONL record per position with the forced next token (the input of `qconform transfer --replay`).
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <sstream>

#include "cli/cli.hpp"
#include "qconform/error.hpp"
#include "qconform/fileio.hpp"
#include "qconform/model.hpp"
#include "qconform/tokenizer.hpp"

namespace qc::cli {
namespace {

struct ReplayArgs {
  std::string model, tokenizer, tokens, out, mode = "fp32", arm;
};

struct Sequence {
  nlohmann::json prompt;
  std::vector<int32_t> tokens;
};

// JSONL lines {"prompt": <string|int>, "tokens": [ids...]}; blank lines and header objects
// ({"kind": "header", ...}) are skipped.
std::vector<Sequence> read_sequences(const std::string& path, int64_t vocab) {
  std::istringstream in(read_file(path));
  std::vector<Sequence> out;
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
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
    Sequence s{obj["prompt"], {}};
    for (const auto& t : obj["tokens"]) {
      QC_INPUT(t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() < vocab,
               "{}:{}: field `tokens`: expected ids in [0, {}), found {}", path, lineno, vocab, t.dump());
      s.tokens.push_back(t.get<int32_t>());
    }
    QC_INPUT(s.tokens.size() >= 2, "{}:{}: field `tokens`: expected at least 2 ids (a context and a target), found {}",
             path, lineno, s.tokens.size());
    out.push_back(std::move(s));
  }
  QC_INPUT(!out.empty(), "{}: expected at least one {{\"prompt\", \"tokens\"}} line, found none", path);
  return out;
}

VerbRunner setup_replay(CLI::App& app) {
  auto a = std::make_shared<ReplayArgs>();
  app.add_option("--model", a->model, "llama2.c checkpoint (.bin, legacy or v1 layout)")->required()->check(CLI::ExistingFile);
  app.add_option("--tokenizer", a->tokenizer, "llama2.c tokenizer (.bin): checked against the model and recorded")
      ->check(CLI::ExistingFile);
  app.add_option("--tokens", a->tokens, "JSONL, one {\"prompt\": id, \"tokens\": [ids...]} per line")
      ->required()->check(CLI::ExistingFile);
  app.add_option("--out", a->out, "write the per-position JSONL records here (atomically)")->required();
  app.add_option("--mode", a->mode, "fp32 (the unquantized reference) or w8a8 (not implemented yet)");
  app.add_option("--arm", a->arm, "w8a8 mode: the arm every linear layer runs through");
  return [a] {
    const LinearMode mode = parse_linear_mode(a->mode);
    LinearFn linear = make_linear_fn(mode, a->arm);
    const Model model = load_llama2c(a->model);
    std::string tok_sha;
    if (!a->tokenizer.empty()) tok_sha = Tokenizer::load_llama2c(a->tokenizer, model.config.vocab).sha256;
    const std::vector<Sequence> seqs = read_sequences(a->tokens, model.config.vocab);
    Decoder decoder(model, linear);
    std::string jsonl = format_header("replay", mode, a->arm, model, a->tokenizer, tok_sha, {{"tokens", a->tokens}}) + "\n";
    int64_t positions = 0, agree = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const Sequence& s : seqs) {
      for (const PositionRecord& r : replay(decoder, s.tokens, s.prompt)) {
        jsonl += format_record(r) + "\n";
        ++positions;
        agree += r.top1_id == r.token;
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_file_atomic(a->out, jsonl);
    fmt::print("replay: {} sequences, {} positions, top-1 = forced token at {} ({:.1f}%), {:.3f} s; wrote {}\n",
               seqs.size(), positions, agree, 100.0 * agree / std::max<int64_t>(positions, 1), seconds, a->out);
    return kExitOk;
  };
}

RegisterVerb register_replay{
    {"replay", "Teacher-forced replay: one prefill pass scores every position of given token sequences", 105,
     setup_replay}};

}  // namespace
}  // namespace qc::cli
