// The model runs of `conform` (conform_runs.hpp).
#include "orchestrate/conform_runs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <optional>

#include "qconform/arm.hpp"
#include "arms/declared_arm.hpp"
#include "checks/c1_boundary.hpp"
#include "checks/identify.hpp"
#include "checks/interchangeability.hpp"
#include "epilogue/formula_space.hpp"
#include "checks/c5_pow2.hpp"
#include "checks/c7_transfer.hpp"
#include "orchestrate/sweep.hpp"
#include "epilogue/block_models.hpp"
#include "accum/fp8_model.hpp"
#include "qconform/epilogue.hpp"
#include "dist/dist.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/limits.hpp"
#include "core/output_lock.hpp"
#include "checks/verify.hpp"
#include "qconform/manifest.hpp"
#include "model/model.hpp"
#include "core/operands_io.hpp"
#include "core/results_json.hpp"
#include "qconform/report.hpp"
#include "core/sha256.hpp"
#include "synth/synth.hpp"
#include "model/tokenizer.hpp"
#include "stats/transfer.hpp"
#include "core/version.hpp"

namespace qc {

namespace fs = std::filesystem;

namespace {

// Story openings for llama2.c models when no prompts are given: every subject x verb x object
// combination, 120 prompts (enough positions for the margin statistics of C7).
std::vector<std::string> story_prompts() {
  constexpr const char* kSubjects[] = {"Lily", "Tom", "The dog", "A little bird", "The old man",
                                       "Sam", "The cat", "Mia", "A big bear", "The king"};
  constexpr const char* kVerbs[] = {"went to", "saw", "found", "wanted", "liked"};
  constexpr const char* kObjects[] = {"the park", "a ball", "the sea", "a cake", "the tree", "a box"};
  std::vector<std::string> out;
  for (const char* s : kSubjects) {
    for (const char* v : kVerbs) {
      for (const char* o : kObjects) out.push_back(fmt::format("{} {} {}", s, v, o));
    }
  }
  out.resize(120);
  return out;
}

// The llama2.c tokenizer beside a llama2.c model, found as `make demo` finds it (the Makefile's
// TOKENIZER: the first `tok*.bin`, in name order, in the model's folder; the folder itself for a
// directory holding `model.bin`); "" when the model is not a llama2.c file or no tokenizer is there.
std::string tokenizer_beside(const std::string& model) {
  std::error_code ec;
  fs::path folder;
  if (fs::is_regular_file(model, ec) && fs::path(model).extension() == ".bin") {
    folder = fs::path(model).parent_path();
  } else if (fs::is_directory(model, ec) && fs::is_regular_file(fs::path(model) / "model.bin", ec)) {
    folder = model;
  } else {
    return "";
  }
  if (folder.empty()) folder = ".";
  std::vector<std::string> found;
  for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("tok", 0) == 0 && e.path().extension() == ".bin" && e.is_regular_file(ec) &&
        !fs::equivalent(e.path(), model, ec)) {
      found.push_back(e.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? std::string() : found.front();
}

// Why `tokenizer_beside` found nothing, for the fallback's warning.
std::string no_tokenizer_reason(const std::string& model) {
  std::error_code ec;
  if (fs::is_regular_file(model, ec) && fs::path(model).extension() == ".bin") {
    const fs::path folder = fs::path(model).parent_path();
    return fmt::format("no tok*.bin in {}", folder.empty() ? std::string(".") : folder.string());
  }
  if (fs::is_directory(model, ec) && fs::is_regular_file(fs::path(model) / "model.bin", ec)) {
    return fmt::format("no tok*.bin in {}", model);
  }
  return "not a llama2.c checkpoint: qconform reads llama2.c tokenizers only";
}

}  // namespace

LoadedModel load_model_and_prompts(const ConformOptions& options, const std::string& dir) {
  ConformOptions o = options;
  LoadedModel lm;
  // A llama2.c model's tokenizer beside it is used unless the prompts are token ids (`.jsonl`).
  const bool token_prompts = o.prompts.size() >= 6 && o.prompts.substr(o.prompts.size() - 6) == ".jsonl";
  std::string found_beside;
  if (!o.model.empty() && o.tokenizer.empty() && !token_prompts) {
    found_beside = tokenizer_beside(o.model);
    o.tokenizer = found_beside;
  }
  if (o.model.empty()) {
    const ModelConfig config = synth_config(o.synthetic_config, o.synthetic_layers);
    lm.model = synth_model(config, o.seed);
    // The synthetic model is defined by its generator and spec: the spec file is its identity.
    const std::string spec_path = dir + "/model-spec.json";
    lm.generated.emplace_back(spec_path, nlohmann::json{{"generator", "qconform synth-model"},
                                                        {"config", o.synthetic_config},
                                                        {"layers", o.synthetic_layers},
                                                        {"seed", o.seed},
                                                        {"qconform", version()}}
                                                 .dump(1) +
                                             "\n");
    lm.inputs.emplace_back("model", spec_path);
    lm.description = fmt::format("synthetic {} ({} layers, seed {})", o.synthetic_config, o.synthetic_layers, o.seed);
  } else {
    lm.model = load_model(o.model);
    // A directory (HF, compressed-tensors) is recorded file by file: a manifest records files.
    for (auto& file : model_files(o.model)) lm.inputs.push_back(std::move(file));
    lm.description = o.model;
  }
  const int64_t vocab = lm.model.config.vocab;
  std::optional<Tokenizer> loaded;
  if (!found_beside.empty()) {
    // Found, not asked for: a tokenizer that does not fit the model is said, and random prompts follow.
    try {
      loaded = Tokenizer::load_llama2c(found_beside, vocab);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::input) throw;
      lm.prompts_warning = fmt::format("the tokenizer found beside it, {}, does not fit it: {}", found_beside, e.what());
      o.tokenizer.clear();
    }
  } else if (!o.tokenizer.empty()) {
    loaded = Tokenizer::load_llama2c(o.tokenizer, vocab);
  }
  if (loaded) {
    const Tokenizer& tok = *loaded;
    lm.prompts_source = fmt::format("{}, encoded with the llama2.c tokenizer {}{}",
                                    o.prompts.empty() ? std::string("the 120 built-in story openings")
                                                      : fmt::format("the text prompts of {}", o.prompts),
                                    o.tokenizer, found_beside.empty() ? "" : " (found beside the model)");
    lm.tokenizer_path = o.tokenizer;
    lm.tokenizer_sha256 = sha256_file(o.tokenizer);
    lm.inputs.emplace_back("tokenizer", o.tokenizer);
    std::vector<std::string> texts;
    if (!o.prompts.empty()) {
      const std::string text = read_file(o.prompts);
      size_t start = 0;
      while (start < text.size()) {
        const size_t nl = text.find('\n', start);
        texts.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
        if (nl == std::string::npos) break;
        start = nl + 1;
      }
      lm.inputs.emplace_back("prompts", o.prompts);
    } else {
      texts = story_prompts();
      const std::string path = dir + "/prompts.txt";
      std::string joined;
      for (const auto& t : texts) joined += t + "\n";
      lm.generated.emplace_back(path, joined);
      lm.inputs.emplace_back("prompts", path);
    }
    for (size_t i = 0; i < texts.size(); ++i) {
      lm.prompts.push_back({nlohmann::json(static_cast<int64_t>(i)), tok.encode(texts[i], /*bos=*/true, /*eos=*/false)});
    }
  } else if (!o.prompts.empty()) {
    lm.prompts = read_token_sequences(o.prompts, vocab, 1);
    lm.inputs.emplace_back("prompts", o.prompts);
    lm.prompts_source = fmt::format("token-id prompts from {}", o.prompts);
  } else {
    // Seeded random token prompts (the synthetic model has no tokenizer).
    uint64_t state = o.seed ^ 0x9E0C0DEull;
    std::string jsonl;
    for (int64_t p = 0; p < o.n_prompts; ++p) {
      TokenSequence s{nlohmann::json(p), {}};
      for (int64_t t = 0; t < o.prompt_tokens; ++t) {
        s.tokens.push_back(static_cast<int32_t>(splitmix64(state) % static_cast<uint64_t>(vocab)));
      }
      jsonl += nlohmann::json{{"prompt", p}, {"tokens", s.tokens}}.dump() + "\n";
      lm.prompts.push_back(std::move(s));
    }
    const std::string path = dir + "/prompts.jsonl";
    lm.generated.emplace_back(path, jsonl);
    lm.inputs.emplace_back("prompts", path);
    lm.prompts_source = fmt::format("{} seeded random-token prompts of {} tokens", o.n_prompts, o.prompt_tokens);
    if (o.model.empty()) {
      lm.prompts_source += " (the synthetic model has no tokenizer)";
      lm.prompts_warning.clear();
    } else {
      // A real model on random tokens measures C7 on inputs no one writes: never silently.
      lm.prompts_warning = fmt::format(
          "FALLING BACK TO RANDOM-TOKEN PROMPTS: no llama2.c tokenizer for {} ({}); C7's flips and sequences are "
          "measured on {} random-token prompts, not on text (give --tokenizer, or put tok*.bin beside a llama2.c "
          "model)",
          o.model, lm.prompts_warning.empty() ? no_tokenizer_reason(o.model) : lm.prompts_warning, o.n_prompts);
    }
  }
  QC_INPUT(!lm.prompts.empty(), "{}: expected at least one prompt", o.prompts);
  return lm;
}

// `fp8`: the pair is FP8 (both arms declare an accumulation model): mode w8a8-fp8.
W8a8Options w8a8_options(const ConformOptions& o, const Model& model, const std::string& arm, bool pow2, bool fp8) {
  W8a8Options w;
  w.arm = arm;
  w.act_quantizer = o.act_quantizer;
  w.pow2 = pow2;
  w.weight_dtype = weight_scale_dtype_for(model.config);
  if (fp8) {
    // A block-scaled pair without scale flags runs DeepSeek's layout, 1x128 activation groups and 128x128
    // weight blocks (a block-scaled checkpoint: its own blocks).
    const bool block = make_arm(arm)->info().block();
    const WeightStorage stored = weight_storage(model);
    const std::string act = block && o.act_scale.empty() ? "per-token-group:128" : o.act_scale;
    const std::string weight = block && o.weight_scale.empty() && !stored.blocks ? "per-block:128x128" : o.weight_scale;
    w.fp8 = fp8_quantization(o.element, act, weight, stored);
  }
  return w;
}

static std::string records_jsonl(const std::vector<PositionRecord>& records) {
  std::string s;
  for (const PositionRecord& r : records) s += format_record(r) + "\n";
  return s;
}

// Greedy generation (verb "generate") or teacher-forced replay of `forced` (verb "replay").
RunFiles run_model(const ConformOptions& o, const LoadedModel& lm, const std::string& dir, const std::string& arm,
                   const std::string& verb, bool pow2, bool fp8, const std::vector<std::vector<int32_t>>* forced,
                   const std::string& tag, const std::vector<std::pair<std::string, std::string>>& extra_inputs,
                   const DecoderVariant* variant) {
  const W8a8Options options = w8a8_options(o, lm.model, arm, pow2, fp8);
  W8a8Linear linear(options);
  LinearFn fn = linear;
  if (variant && variant->tp_degree > 0) {
    variant->stats->title = fmt::format("tensor parallel {} ({})", variant->tp_degree, variant->reduction);
    variant->stats->baseline = "the layer run unsharded";
    fn = with_tensor_parallel(fn, variant->tp_degree, variant->reduction, options, variant->stats, variant->unsharded);
  }
  if (variant && variant->record) fn = with_row_recorder(fn, variant->prompts);
  if (variant && !variant->mates.empty()) fn = with_batch_mates(fn, variant->mates, o.seed, variant->stats, variant->prompts);
  Decoder decoder(lm.model, fn);
  RunFiles f;
  nlohmann::json extra = {{"pow2", pow2}, {"act_quantizer", o.act_quantizer}};
  nlohmann::json config = {{"max_new", o.max_new}, {"pow2", pow2}, {"act_quantizer", o.act_quantizer},
                           {"linear_mode", to_string(linear_mode(options))}, {"seed", o.seed}};
  if (options.fp8) {  // the FP8 quantization is part of what C0 compares
    for (nlohmann::json* j : {&extra, &config}) j->update(fp8_run_config(options));
  }
  if (variant) {
    for (nlohmann::json* j : {&extra, &config}) {
      if (!variant->mates.empty()) (*j)["batch_mates"] = variant->mates;
      if (!variant->mates.empty() && variant->prompts) (*j)["batch_mates_from"] = "other prompts";
      if (variant->tp_degree > 0) (*j)["tp"] = {{"degree", variant->tp_degree}, {"reduction", variant->reduction}};
    }
  }
  std::string text =
      format_header(verb, linear_mode(options), arm, lm.model, lm.tokenizer_path, lm.tokenizer_sha256, extra) + "\n";
  // Prompts are shared over the ranks of an MPI job (one process: all of them); rank 0 merges the
  // records in prompt order and writes the files; every rank receives the generated sequences
  // (the replays force them).
  std::vector<size_t> items;
  std::vector<double> cost;
  for (size_t i = 0; i < lm.prompts.size(); ++i) {
    items.push_back(i);
    const size_t forced_len = forced ? (*forced)[i].size() : lm.prompts[i].tokens.size() + static_cast<size_t>(o.max_new);
    cost.push_back(static_cast<double>(forced_len));
  }
  const dist::Shared shared = dist::run_shared(items, cost, [&](const std::vector<size_t>& mine, dist::Outcome& out,
                                                                std::string& in_progress) {
    for (size_t i : mine) {
      in_progress = fmt::format("{} {} prompt {}", tag, arm, lm.prompts[i].prompt.dump());
      decoder.reset();
      if (variant && variant->prompts) variant->prompts->current = static_cast<int64_t>(i);
      if (verb == "generate") {
        const GenerateResult g = generate_greedy(decoder, lm.prompts[i].tokens, o.max_new, lm.prompts[i].prompt);
        out.results[i] = {{"jsonl", records_jsonl(g.records)}, {"tokens", g.tokens}};
      } else {
        out.results[i] = {{"jsonl", records_jsonl(replay(decoder, (*forced)[i], lm.prompts[i].prompt))}};
      }
    }
  });
  nlohmann::json sequences = nlohmann::json::array();
  for (const auto& [i, r] : shared.results) {
    text += r.at("jsonl").get<std::string>();
    if (verb == "generate") sequences.push_back(r.at("tokens"));
  }
  if (verb == "generate") {
    for (const auto& t : parse_json(dist::broadcast(sequences.dump()), "the sequences from rank 0")) {
      f.sequences.push_back(t.get<std::vector<int32_t>>());
    }
  }
  f.record = linear.last_record();
  if (!dist::world().root()) return f;
  f.jsonl = fmt::format("{}/{}.jsonl", dir, tag);
  write_file_atomic(f.jsonl, text);
  std::vector<std::pair<std::string, std::string>> inputs = lm.inputs;
  inputs.insert(inputs.end(), extra_inputs.begin(), extra_inputs.end());
  Manifest m = make_manifest(verb, arm, f.record, inputs, config);
  f.manifest = fmt::format("{}/{}.manifest.json", dir, tag);
  write_manifest(f.manifest, m);
  return f;
}

// Records without the header line (which names the arm and so always differs).
std::string records_body(const std::string& path) {
  const std::string text = read_file(path);
  const size_t nl = text.find('\n');
  return nl == std::string::npos ? std::string() : text.substr(nl + 1);
}

}  // namespace qc
