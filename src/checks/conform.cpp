// The conformance procedure end to end (C0 -> C7). Each stage writes its artefact into the output
// directory atomically; results.json and report.html come last.
#include "checks/conform.hpp"

#include <fmt/format.h>

#include <algorithm>
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
#include "checks/sweep.hpp"
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

namespace {

namespace fs = std::filesystem;

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

struct LoadedModel {
  Model model;
  std::string tokenizer_path, tokenizer_sha256;
  std::vector<TokenSequence> prompts;
  std::vector<std::pair<std::string, std::string>> inputs;  // role -> path, for every manifest
  std::string description;
  // Files conform makes of its own (the synthetic model's spec, default prompts), path -> content:
  // written into the output directory once every input was validated (nothing is created before).
  std::vector<std::pair<std::string, std::string>> generated;
  // Where the prompts came from, and a warning when a real model runs on random-token prompts
  // (results.json `prompts`; printed by conform and shown in the report's banner).
  std::string prompts_source, prompts_warning;
};

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
    const bool block = is_block_model_name(make_arm(arm)->info().accumulation_model);
    const WeightStorage stored = weight_storage(model);
    const std::string act = block && o.act_scale.empty() ? "per-token-group:128" : o.act_scale;
    const std::string weight = block && o.weight_scale.empty() && !stored.blocks ? "per-block:128x128" : o.weight_scale;
    w.fp8 = fp8_quantization(o.element, act, weight, stored);
  }
  return w;
}

struct RunFiles {
  std::string jsonl, manifest;
  RunRecord record;
  std::vector<std::vector<int32_t>> sequences;
};

std::string records_jsonl(const std::vector<PositionRecord>& records) {
  std::string s;
  for (const PositionRecord& r : records) s += format_record(r) + "\n";
  return s;
}

// Greedy generation (verb "generate") or teacher-forced replay of `forced` (verb "replay").
RunFiles run_model(const ConformOptions& o, const LoadedModel& lm, const std::string& dir, const std::string& arm,
                   const std::string& verb, bool pow2, bool fp8, const std::vector<std::vector<int32_t>>* forced,
                   const std::string& tag, const std::vector<std::pair<std::string, std::string>>& extra_inputs) {
  const W8a8Options options = w8a8_options(o, lm.model, arm, pow2, fp8);
  W8a8Linear linear(options);
  Decoder decoder(lm.model, linear);
  RunFiles f;
  nlohmann::json extra = {{"pow2", pow2}, {"act_quantizer", o.act_quantizer}};
  nlohmann::json config = {{"max_new", o.max_new}, {"pow2", pow2}, {"act_quantizer", o.act_quantizer},
                           {"linear_mode", to_string(linear_mode(options))}, {"seed", o.seed}};
  if (options.fp8) {  // the FP8 quantization is part of what C0 compares
    for (nlohmann::json* j : {&extra, &config}) j->update(fp8_run_config(options));
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
std::string body(const std::string& path) {
  const std::string text = read_file(path);
  const size_t nl = text.find('\n');
  return nl == std::string::npos ? std::string() : text.substr(nl + 1);
}

// What formula an arm declares, for results.json and the report: {source: "declared", declared,
// formula (the point's notation where the row has one)}.
nlohmann::json declared_formula(const ArmInfo& info) {
  nlohmann::json f = {{"source", "declared"}, {"declared", info.epilogue}, {"formula", info.epilogue}};
  try {
    const Epilogue& e = epilogue(info.epilogue);
    if (const auto p = row_point(e)) {
      const auto sp = row_swap_point(e);
      f["formula"] = sp ? fmt::format("{}; {}: {}", formula_notation(*p), dispatch_condition(e), formula_notation(*sp))
                        : formula_notation(*p);
    }
  } catch (const Error&) {
    // A declaration outside the table (an FP8 arm's `fp8-scaled` has no point): its name is its formula.
  }
  return f;
}

// Identifies an arm that declares no epilogue (on rank 0; every rank receives the declaration) and
// returns it declared, or unchanged when identify names no single class. `summary` receives what
// results.json and the report show.
std::unique_ptr<Arm> identify_undeclared(std::unique_ptr<Arm> arm, const std::string& side, nlohmann::json& summary) {
  const bool root = dist::world().root();
  std::string declaration;
  if (root) {
    try {
      const IdentifyResult r = identify(*arm);
      summary = identify_summary(r);
      declaration = identified_declaration(r);
    } catch (const Error& e) {
      // An arm identify cannot probe (it refuses the probe operands) goes on undeclared, as before.
      if (e.kind() != ErrorKind::input) throw;
      summary = {{"source", "identify"}, {"verdict", "error"}, {"reason", e.what()}};
    }
  }
  declaration = dist::broadcast(declaration);
  if (declaration.empty()) return arm;
  const std::string provenance = root ? summary.at("provenance").get<std::string>() : std::string("identified by qconform identify");
  return declare_epilogue(std::move(arm), declaration, fmt::format("conform: the formula identified for arm {}", side), provenance);
}

// What an FP8 arm declares, for results.json and the report: its accumulation model (measured by C1)
// and the epilogue verify holds it to.
nlohmann::json declared_fp8_formula(const ArmInfo& info) {
  if (is_block_model_name(info.accumulation_model)) {  // the scales and the bf16 rounding are part of the model
    return {{"source", "declared"},
            {"declared", info.accumulation_model},
            {"accumulation_model", info.accumulation_model},
            {"formula", declared_model_formula(info.accumulation_model)}};
  }
  const std::string epilogue = info.epilogue.empty() ? std::string(fp8_epilogue().name) : info.epilogue;
  return {{"source", "declared"},
          {"declared", fmt::format("{} + {}", info.accumulation_model, epilogue)},
          {"accumulation_model", info.accumulation_model},
          {"formula", fmt::format("{}; then {}", accumulation_formula(fp8_accumulation_model(info.accumulation_model).model),
                                  epilogue)}};
}

// The FP8 pair's divergence versus reduction depth (`qconform sweep` on synthetic FP8 operands) as the
// report's `sweep` section reads it, each point with the differences the declared models explained;
// the sweep's own JSON under `sweep`.
nlohmann::json fp8_depth_curve(const ConformOptions& o) {
  SweepOptions so;
  so.arm_a = o.arm_a;
  so.arm_b = o.arm_b;
  so.ks = o.sweep_ks;
  so.m = o.sweep_m;
  so.n = o.sweep_n;
  so.seeds = o.sweep_seeds;
  so.first_seed = o.seed;
  const SweepResult r = run_sweep(so);
  nlohmann::json points = nlohmann::json::array();
  for (const SweepRow& w : r.rows) {
    points.push_back({{"k", w.k},
                      {"bitwise_diff", w.differing},
                      {"total", w.total},
                      {"max_ulp", w.max_ulp},
                      {"explained", w.explained_cells ? nlohmann::json(w.explained) : nlohmann::json(nullptr)},
                      {"explained_of", w.explained_of}});
  }
  return {{"x", "k"},
          {"description", fmt::format("{} vs {} on synthetic {}FP8 operands (M = {}, N = {}, {} seeds per K): the share "
                                      "of differing elements whose two values the declared accumulation models "
                                      "predicted exactly is the explained column",
                                      o.arm_a, o.arm_b, r.format == SweepFormat::fp8_block ? "block-scaled " : "",
                                      o.sweep_m, o.sweep_n, o.sweep_seeds)},
          {"series", {{{"name", fmt::format("{}FP8 {} vs {}", r.format == SweepFormat::fp8_block ? "block-scaled " : "",
                                            o.arm_a, o.arm_b)},
                       {"points", points}}}},
          {"sweep", to_json(r)}};
}

}  // namespace

ConformOutcome run_conform(const ConformOptions& o, const std::function<void(int, int, const std::string&)>& progress) {
  constexpr int kStages = 11;
  int stage = 0;
  const auto step = [&](const std::string& what) {
    if (progress) progress(++stage, kStages, what);
  };
  // NaN fails both comparisons; -1 (the default) means "report only".
  QC_INPUT(o.max_flip_rate == -1 || (o.max_flip_rate >= 0 && o.max_flip_rate <= 1),
           "--max-flip-rate: expected a rate in [0, 1] (omit the option to only report the rate), found {}",
           o.max_flip_rate);
  QC_INPUT(o.tolerance_ulps >= 0, "--tolerance-ulps: expected a non-negative number of ulps, found {}", o.tolerance_ulps);
  // The output directory is made only once every input was validated (below): a run refused for
  // its inputs leaves nothing behind. What can be known of it now is checked now.
  std::error_code ec;
  QC_INPUT(!fs::exists(o.out_dir, ec) || fs::is_directory(o.out_dir, ec),
           "--out {}: expected a directory (or a path where one can be made), found an existing {}", o.out_dir,
           fs::is_symlink(o.out_dir, ec) ? "symbolic link to a non-directory" : "file");
  const std::string dir = fs::path(o.out_dir).string();
  auto arm_a = make_arm(o.arm_a);
  auto arm_b = make_arm(o.arm_b);
  QC_INPUT(o.arm_a != o.arm_b, "--arms {},{}: expected two different arms (the treatment)", o.arm_a, o.arm_b);
  // An FP8 pair (both arms declare an accumulation model) runs the decoder in mode w8a8-fp8 and is
  // verified against the declared models (docs/accumulation.md); a mixed pair compares nothing.
  const bool fp8 = arm_a->info().fp8();
  QC_INPUT(fp8 == arm_b->info().fp8(),
           "--arms {},{}: expected two INT8 arms or two FP8 arms (an FP8 element or accumulation model), found "
           "arm A {} and arm B {}",
           o.arm_a, o.arm_b, fp8 ? "FP8" : "INT8", fp8 ? "INT8" : "FP8");
  for (const auto& [flag, value] : {std::pair{"--element", &o.element}, std::pair{"--act-scale", &o.act_scale},
                                    std::pair{"--weight-scale", &o.weight_scale}}) {
    QC_INPUT(fp8 || value->empty(), "{} `{}`: the arms {} and {} are INT8 arms; FP8 quantization applies to two FP8 arms",
             flag, *value, o.arm_a, o.arm_b);
  }

  // An arm that declares no formula (a plugin, a declared-nothing arm) is identified first: the
  // identified formula is its declaration for C1 and C2-C6 (C6's predicted set), with its
  // provenance in the results; `ambiguous` or `unexplained` is reported and the arm goes on
  // undeclared (docs/identify.md, "conform").
  step("identify undeclared arms");
  nlohmann::json formulas[2];
  std::unique_ptr<Arm>* arms[2] = {&arm_a, &arm_b};
  for (int side = 0; side < 2; ++side) {
    const ArmInfo info = (*arms[side])->info();
    if (!info.accumulation_model.empty()) {
      formulas[side] = declared_fp8_formula(info);  // its model is measured by C1, not identified
    } else if (info.fp8() && !o.identify) {
      formulas[side] = {{"source", "none"},
                        {"reason", "FP8 arm with no declared accumulation model; not identified (--no-identify): its "
                                   "differences are not predicted"}};
    } else if (!info.fp8() && !info.epilogue.empty()) {
      formulas[side] = declared_formula(info);
    } else if (!o.identify) {
      formulas[side] = {{"source", "none"}, {"reason", "declares no formula; not identified (--no-identify)"}};
    } else {
      *arms[side] = identify_undeclared(std::move(*arms[side]), side == 0 ? "A" : "B", formulas[side]);
    }
  }

  // Under MPI (docs/distributed.md) the layers of predict and verify and the prompts of the model
  // runs are shared over the ranks; rank 0 alone runs the rest and writes every file (other ranks
  // return an outcome without results).
  const bool root = dist::world().root();
  step("model and prompts");
  const LoadedModel lm = load_model_and_prompts(o, dir);
  // The model and the mode fit (an FP8 pair refuses a bias and an INT8 checkpoint; an INT8 pair an FP8
  // checkpoint) before anything runs.
  check_checkpoint_takes_options(lm.description, weight_storage(lm.model), lm.model.config.qkv_bias,
                                 w8a8_options(o, lm.model, o.arm_a, false, fp8));
  // Every input is valid: the output directory is made, locked against a second writer, and given
  // the files conform made of its own.
  fs::create_directories(o.out_dir, ec);
  QC_INPUT(!ec && fs::is_directory(o.out_dir), "--out {}: expected a directory that can be created, found: {}", o.out_dir,
           ec ? ec.message() : "an existing file");
  lock_output("--out", o.out_dir);
  for (const auto& [path, content] : lm.generated) write_file_atomic(path, content);

  // C1 on each arm.
  step("C1 boundary suite");
  const BoundaryResult boundary_a = root ? run_boundary(*arm_a) : BoundaryResult{};
  const BoundaryResult boundary_b = root ? run_boundary(*arm_b) : BoundaryResult{};
  // Exit 0 means checked: an arm that ran no probe of a mandatory C1 family (an unavailable
  // device, a plugin refusing every probe) leaves nothing to compare (docs/hostile-inputs.md).
  for (const BoundaryResult* b : {&boundary_a, &boundary_b}) {
    QC_INPUT(!root || b->checked(), "C1 for arm `{}`: nothing to check: no probe of {} ran through the arm ({})",
             printable_text(b->arm.label), fmt::join(b->families_not_run, ", "), b->c1.summary);
  }
  CheckResult c1 = boundary_a.c1;
  c1.verdict = combine(boundary_a.c1.verdict, boundary_b.c1.verdict);
  c1.summary = fmt::format("A: {} — B: {}", boundary_a.c1.summary, boundary_b.c1.summary);
  // Every failed case, with its arm: the case id, inputs, what the arm returned and what was expected,
  // and its own cause; the check points to the first one's.
  nlohmann::json failed_cases = nlohmann::json::array();
  for (const auto& [side, b] : {std::pair{"A", &boundary_a}, std::pair{"B", &boundary_b}}) {
    for (const BoundaryCase& bc : b->cases) {
      if (bc.verdict != Verdict::fail) continue;
      if (failed_cases.empty()) c1.points_to = fmt::format("arm {} ({}): {}", side, printable_text(b->arm.label), bc.points_to);
      failed_cases.push_back({{"arm", side}, {"label", printable_text(b->arm.label)}, {"id", bc.id},
                              {"inputs", bc.inputs}, {"detail", bc.detail}, {"points_to", bc.points_to}});
    }
  }
  c1.evidence = {{"a", to_json(boundary_a)}, {"b", to_json(boundary_b)}, {"failed_cases", failed_cases}};

  // Capture the operands of every linear layer (arm A's run; activation quantization is shared).
  step("capture operands");
  std::vector<std::vector<int32_t>> prompt_tokens;
  for (const TokenSequence& p : lm.prompts) prompt_tokens.push_back(p.tokens);
  const std::vector<LayerOperands> captured =
      capture_operands(lm.model, w8a8_options(o, lm.model, o.arm_a, false, fp8), prompt_tokens).layers;
  const std::string ops_path = dir + "/operands.safetensors";
  // Every rank captured the same operands (the capture is deterministic); rank 0 writes them and
  // tells the others their digest.
  OperandSet ops;
  if (root) {
    save_operands(ops_path, captured, {{"source", "qconform conform capture"}, {"model", lm.description}});
    ops = load_operands(ops_path);
    std::vector<std::pair<std::string, std::string>> inputs = lm.inputs;
    inputs.emplace_back("operands", ops_path);
    write_manifest(dir + "/capture.manifest.json",
                   make_manifest("capture", o.arm_a, std::nullopt, inputs, {{"act_quantizer", o.act_quantizer}}));
  } else {
    ops.path = ops_path;
    ops.layers = captured;
  }
  ops.sha256 = dist::broadcast(ops.sha256);

  // C2: predictions pinned before any comparison.
  step("C2 predict and pin");
  std::vector<size_t> items;
  std::vector<double> cost;
  for (size_t i = 0; i < ops.layers.size(); ++i) {
    const LayerOperands& l = ops.layers[i];
    items.push_back(i);
    cost.push_back(static_cast<double>(l.m) * static_cast<double>(l.n) * static_cast<double>(l.k));
  }
  const dist::Shared predicted = dist::run_shared(
      items, cost, [&](const std::vector<size_t>& mine, dist::Outcome& out, std::string& in_progress) {
        for (size_t i : mine) {
          in_progress = fmt::format("predict layer {} `{}`", i, ops.layers[i].name);
          out.results[i] = to_json(predict_layer(ops.layers[i]));
        }
      });
  PredictionSet predictions;
  predictions.operands_path = ops.path;
  predictions.operands_sha256 = ops.sha256;
  for (const auto& [i, l] : predicted.results) predictions.layers.push_back(layer_prediction_from_json(l));
  const std::string predictions_path = dir + "/predictions.json";
  const std::string predictions_text = dist::broadcast(to_json(predictions).dump(1) + "\n");
  predictions = prediction_set_from_json(parse_json(predictions_text, "the predictions from rank 0"), "predictions from rank 0");
  predictions.pinned = !fp8;  // pinned below, before any comparison runs
  // FP8: C2 does not apply (no INT32 accumulator to bound); nothing is predicted, written or pinned.
  const std::string pin = fp8 ? std::string() : "sha256:" + sha256_hex(std::string_view(predictions_text));
  if (root && !fp8) {
    write_file_atomic(predictions_path, predictions_text);
    QC_CHECK(sha256_file(predictions_path) == pin, "the predictions file changed after it was pinned");
  }

  // C2–C6 at layer level.
  step("C2-C6 verify");
  VerifyOptions vo;
  vo.tolerance_ulps = o.tolerance_ulps;
  const int64_t captured_m = ops.layers.front().m;
  for (int64_t m : o.m_sweep) {
    if (m < captured_m) vo.m_sweep.push_back(m);
  }
  if (!vo.m_sweep.empty()) vo.m_sweep.push_back(captured_m);
  std::string reference;
  const dist::Shared verified = dist::run_shared(
      items, cost, [&](const std::vector<size_t>& mine, dist::Outcome& out, std::string& in_progress) {
        VerifySelection selection;
        selection.only = true;
        selection.layers = mine;
        selection.started = [&](size_t i) { in_progress = fmt::format("verify layer {} `{}`", i, ops.layers[i].name); };
        selection.done = [&](size_t i, const LayerVerification& v) { out.results[i] = to_json(v); };
        const VerifiedLayers part = verify_layer_runs(
            *arm_a, *arm_b, ops.layers.size(), [&](size_t i) { return ops.layers[i]; }, predictions, vo, selection);
        reference = part.reference;
        nlohmann::json seconds = nlohmann::json::array();
        for (const auto& [phase, sec] : part.seconds) seconds.push_back({phase, sec});
        out.rank_info = {{"seconds", seconds}, {"wall_seconds", part.wall_seconds}};
      });
  VerifyResult verify;
  if (root) {
    std::vector<LayerVerification> layers;
    for (const auto& [i, j] : verified.results) layers.push_back(layer_verification_from_json(j, "rank results"));
    if (reference.empty()) reference = reference_description(resolve_reference(vo.reference));
    verify = merge_verifications(arm_a->info(), arm_b->info(), reference, std::move(layers), predictions, vo);
    for (const nlohmann::json& info : verified.rank_info) {  // timings: every rank's phases added up
      for (const auto& p : info.at("seconds")) {
        const std::string phase = p.at(0).get<std::string>();
        auto it = std::find_if(verify.seconds.begin(), verify.seconds.end(), [&](const auto& x) { return x.first == phase; });
        if (it == verify.seconds.end()) {
          verify.seconds.emplace_back(phase, p.at(1).get<double>());
        } else {
          it->second += p.at(1).get<double>();
        }
      }
      verify.wall_seconds = std::max(verify.wall_seconds, info.at("wall_seconds").get<double>());
    }
  }

  // Token level: free-running generations, teacher-forced replays of A's sequences, and the
  // power-of-two probe end to end.
  step("generate (real scales)");
  const RunFiles gen_a = run_model(o, lm, dir, o.arm_a, "generate", false, fp8, nullptr, "generate.A", {});
  const RunFiles gen_b = run_model(o, lm, dir, o.arm_b, "generate", false, fp8, nullptr, "generate.B", {});
  step("replay (teacher forcing)");
  const std::vector<std::pair<std::string, std::string>> forced_input = {{"forced_tokens", gen_a.jsonl}};
  const RunFiles rep_a = run_model(o, lm, dir, o.arm_a, "replay", false, fp8, &gen_a.sequences, "replay.A", forced_input);
  const RunFiles rep_b = run_model(o, lm, dir, o.arm_b, "replay", false, fp8, &gen_a.sequences, "replay.B", forced_input);
  step("generate (power-of-two probe)");
  const RunFiles pow_a = run_model(o, lm, dir, o.arm_a, "generate", true, fp8, nullptr, "generate.pow2.A", {});
  const RunFiles pow_b = run_model(o, lm, dir, o.arm_b, "generate", true, fp8, nullptr, "generate.pow2.B", {});
  // FP8: the depth curve (divergence versus K on synthetic FP8 operands) with the share of the
  // differences the declared models explain, for the report.
  nlohmann::json depth = nullptr;
  if (fp8 && root && !o.sweep_ks.empty()) {
    step("FP8 depth sweep");
    depth = fp8_depth_curve(o);
  }

  if (!root) return {};

  // C0: the replay runs must differ only in the arm.
  step("C0 identity contract");
  JoinResult join = join_manifests(read_manifest(rep_a.manifest), read_manifest(rep_b.manifest), "arm", true);
  CheckResult c0 = join.c0;
  if (!join.verified() && o.allow_unverified) {
    c0.summary += " (proceeding: --allow-unverified)";
  }

  step("C7 transfer");
  transfer::TransferOptions to;
  to.replay = true;
  to.seed = 20240607 ^ o.seed;
  to.min_bin_support = 20;
  const transfer::TransferResult replay_t =
      transfer::analyze_transfer(transfer::read_transfer_jsonl(rep_a.jsonl), transfer::read_transfer_jsonl(rep_b.jsonl), to);
  transfer::TransferOptions tg;
  const transfer::TransferResult gen_t =
      transfer::analyze_transfer(transfer::read_transfer_jsonl(gen_a.jsonl), transfer::read_transfer_jsonl(gen_b.jsonl), tg);
  const CheckResult c7 = c7_transfer(replay_t, gen_t, o.max_flip_rate);

  // The power-of-two probe end to end, as evidence for C5: the generated positions were not
  // captured and predicted, so bitwise identity is expected there but not required by a pin.
  std::vector<CheckResult> checks = verify.checks;  // C2..C6
  CheckResult& c5 = checks[3];
  const bool pow2_identical = body(pow_a.jsonl) == body(pow_b.jsonl);
  size_t pow2_same_sequences = 0;
  for (size_t i = 0; i < pow_a.sequences.size(); ++i) pow2_same_sequences += pow_a.sequences[i] == pow_b.sequences[i];
  c5_add_end_to_end(c5, pow_a.sequences.size(), pow2_same_sequences, pow2_identical, fp8);

  std::vector<CheckResult> all{c0, c1};
  all.insert(all.end(), checks.begin(), checks.end());
  all.push_back(c7);

  // The answer: verify's facts (C2-C6, every run), with the checks only conform runs and the tokens.
  InterchangeabilityFacts facts = facts_from_verify(verify, UserLanguage::cli);
  facts.failures.clear();
  for (const CheckResult& c : all) {
    if (c.verdict != Verdict::fail) continue;
    std::string stage = check_stage(c.id), detail = c.points_to;
    if (c.id == "C1" && !failed_cases.empty()) detail = fmt::format("case {}, {}", failed_cases[0]["id"].get<std::string>(), detail);
    if (fp8 && !verify.stage.empty() && c.id != "C0" && c.id != "C1" && c.id != "C7") {
      stage = verify.stage;
      detail = verify.stage_detail;
    }
    facts.failures.push_back({c.id, stage, detail});
  }
  facts.tokens_measured = true;
  facts.flips = static_cast<int64_t>(replay_t.replay->n_flips);
  facts.positions = static_cast<int64_t>(replay_t.replay->n_positions);
  facts.sequences = static_cast<int64_t>(gen_t.sequence->n_prompts);
  facts.identical_sequences = static_cast<int64_t>(gen_t.sequence->n_identical);
  // FP8: the two models differ under power-of-two scales too, so only INT8 pairs expect identity there.
  facts.pow2_end_to_end_identical = fp8 || pow2_identical;
  const InterchangeabilityAnswer answer = decide_interchangeability(facts);

  nlohmann::json manifest_files = nlohmann::json::array();
  for (const std::string& path : {dir + "/capture.manifest.json", gen_a.manifest, gen_b.manifest, rep_a.manifest,
                                  rep_b.manifest, pow_a.manifest, pow_b.manifest}) {
    manifest_files.push_back({{"path", path}, {"sha256", sha256_file(path)}, {"manifest", to_json(read_manifest(path))}});
  }
  nlohmann::json verify_json = to_json(verify);
  verify_json.erase("interchangeability");  // conform's answer (below) also reads C0, C1, C7 and the tokens
  for (size_t side = 0; side < 2 && side < verify_json["arms"].size(); ++side) verify_json["arms"][side]["formula"] = formulas[side];
  nlohmann::json results = results_envelope("results", {
      {"title", fmt::format("qconform: {} vs {}", o.arm_a, o.arm_b)},
      {"created", utc_now_iso8601()},
      {"project_version", version()},
      {"model", lm.description},
      {"arms", verify_json["arms"]},
      {"checks", all},
      {"predictions", fp8 ? nlohmann::json(nullptr) : to_json(predictions)},
      {"pin", fp8 ? nlohmann::json(nullptr) : nlohmann::json(pin)},
      {"verify", verify_json},
      {"transfer", transfer::to_json(replay_t)},
      {"generation", transfer::to_json(gen_t)},
      {"manifests", {{"files", manifest_files}, {"join", to_json(join)}}},
      {"unverified", !join.verified()},
      {"fp8", fp8 ? nlohmann::json{{"quantization", fp8_run_config(w8a8_options(o, lm.model, o.arm_a, false, true))},
                                   {"models", verify_json["fp8"]["models"]}}
                  : nlohmann::json(nullptr)},
      {"interchangeability", to_json(answer)},
      {"prompts", {{"source", lm.prompts_source},
                   {"count", lm.prompts.size()},
                   {"tokenizer", lm.tokenizer_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(lm.tokenizer_path)},
                   {"warning", lm.prompts_warning.empty() ? nlohmann::json(nullptr) : nlohmann::json(lm.prompts_warning)}}},
      {"sweep", depth},
      {"allow_unverified", o.allow_unverified},
  });
  ConformOutcome out;
  out.passed = std::none_of(all.begin(), all.end(), [](const CheckResult& c) { return c.verdict == Verdict::fail; });
  if (!join.verified() && o.allow_unverified) {
    out.passed = std::none_of(all.begin() + 1, all.end(), [](const CheckResult& c) { return c.verdict == Verdict::fail; });
  }
  out.results_path = dir + "/results.json";
  out.report_path = dir + "/report.html";
  write_file_atomic(out.results_path, results.dump(1) + "\n");
  write_file_atomic(out.report_path, render_report(results));
  out.results = std::move(results);
  return out;
}

}  // namespace qc
