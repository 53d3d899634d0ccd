// `qconform generate`: greedy decoding with the KV cache, one JSONL record per generated token
// (the input of `qconform transfer`), the decoded text on stdout.
#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "cli/cli.hpp"
#include "qconform/error.hpp"
#include "qconform/fileio.hpp"
#include "qconform/model.hpp"
#include "qconform/tokenizer.hpp"

namespace qc::cli {
namespace {

struct GenerateArgs {
  std::string model, tokenizer, prompts, out, tokens_out, mode = "fp32", arm;
  int64_t max_new = 256;
  bool compare = false;
};

// One prompt per line; a trailing '\r' is dropped; an empty line starts from BOS alone.
std::vector<std::string> read_prompt_lines(const std::string& path) {
  const std::string text = read_file(path);
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  QC_INPUT(!lines.empty(), "{}: expected at least one prompt line, the file is empty", path);
  return lines;
}

VerbRunner setup_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  app.add_option("--model", a->model, "llama2.c checkpoint (.bin, legacy or v1 layout)")->required()->check(CLI::ExistingFile);
  app.add_option("--tokenizer", a->tokenizer, "llama2.c tokenizer (.bin)")->required()->check(CLI::ExistingFile);
  app.add_option("--prompts", a->prompts, "text file, one prompt per line (empty line = start from BOS); default: one empty prompt")
      ->check(CLI::ExistingFile);
  app.add_option("--max-new", a->max_new, "maximum generated tokens per prompt")->check(CLI::PositiveNumber);
  app.add_option("--out", a->out, "write the per-position JSONL records here (atomically)");
  app.add_option("--tokens-out", a->tokens_out, "write each full sequence as {\"prompt\": id, \"tokens\": [...]} (input of `replay --tokens`)");
  app.add_option("--mode", a->mode, "fp32 (the unquantized reference) or w8a8 (not implemented yet)");
  app.add_option("--arm", a->arm, "w8a8 mode: the arm every linear layer runs through");
  app.add_flag("--compare-prefill-decode", a->compare,
               "re-score each generated sequence with one prefill pass; report where prefill and decode disagree");
  return [a] {
    const LinearMode mode = parse_linear_mode(a->mode);
    LinearFn linear = make_linear_fn(mode, a->arm);  // before any loading: w8a8 says "not implemented" at once
    const Model model = load_llama2c(a->model);
    const Tokenizer tok = Tokenizer::load_llama2c(a->tokenizer, model.config.vocab);
    const std::vector<std::string> prompts = a->prompts.empty() ? std::vector<std::string>{""} : read_prompt_lines(a->prompts);
    Decoder decoder(model, linear);

    std::string jsonl = format_header("generate", mode, a->arm, model, tok.source, tok.sha256,
                                      {{"prompts", a->prompts}, {"max_new", a->max_new}}) + "\n";
    std::string tokens_jsonl;
    int64_t generated = 0;
    double seconds = 0;
    PrefillDecodeComparison total;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const nlohmann::json id = static_cast<int64_t>(i);
      const std::vector<int32_t> prompt = tok.encode(prompts[i], /*bos=*/true, /*eos=*/false);
      const auto t0 = std::chrono::steady_clock::now();
      const GenerateResult g = generate_greedy(decoder, prompt, a->max_new, id);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      generated += static_cast<int64_t>(g.records.size());
      fmt::print("[prompt {}] {}\n", i, tok.decode(g.tokens));
      for (const PositionRecord& r : g.records) jsonl += format_record(r) + "\n";
      tokens_jsonl += nlohmann::json{{"prompt", id}, {"tokens", g.tokens}}.dump() + "\n";
      if (a->compare) {
        const PrefillDecodeComparison c = compare_prefill_decode(decoder, g);
        total.positions += c.positions;
        total.top1_disagreements += c.top1_disagreements;
        total.bitwise_different += c.bitwise_different;
        total.max_abs_diff = std::max(total.max_abs_diff, c.max_abs_diff);
        if (c.top1_disagreements > 0) {
          fmt::print("  prompt {}: prefill and decode top-1 disagree at positions {}\n", i,
                     fmt::join(c.disagreeing_positions, ", "));
        }
      }
    }
    fmt::print(stderr, "generate: {} prompts, {} tokens in {:.3f} s ({:.1f} tokens/s, mode {})\n", prompts.size(),
               generated, seconds, seconds > 0 ? generated / seconds : 0.0, to_string(mode));
    if (a->compare) {
      fmt::print("prefill vs decode: {} positions, {} top-1 disagreements, max |logit difference| {:.9g}, {} of {} "
                 "logits differ bitwise\n",
                 total.positions, total.top1_disagreements, total.max_abs_diff, total.bitwise_different,
                 total.positions * model.config.vocab);
    }
    if (!a->out.empty()) write_file_atomic(a->out, jsonl);
    if (!a->tokens_out.empty()) write_file_atomic(a->tokens_out, tokens_jsonl);
    return kExitOk;
  };
}

RegisterVerb register_generate{
    {"generate", "Greedy generation with the KV cache: one JSONL record per token (top-1/top-2 logits, margin)", 100,
     setup_generate}};

}  // namespace
}  // namespace qc::cli
