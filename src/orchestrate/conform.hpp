// The conformance procedure end to end: C0 -> C7 on two arms and a model, in order, with C2's
// predictions pinned before any comparison runs. Writes DIR/results.json, DIR/report.html, the
// operands, predictions, generations, replays and one manifest per run.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qc {

struct ConformOptions {
  std::string arm_a = "cpu:vllm-cutlass", arm_b = "cpu:vllm-triton";
  std::string model;        // llama2.c .bin or an HF/compressed-tensors directory; empty: built-in synthetic
  std::string tokenizer;    // llama2.c tokenizer (text prompts)
  std::string prompts;      // text (one prompt a line, llama2.c) or token JSONL; empty: built-in
  std::string out_dir = "qconform-out";
  std::string synthetic_config = "qwen3-1.7b-shaped";
  int64_t synthetic_layers = 2;
  uint64_t seed = 0;
  int64_t max_new = 32;
  int64_t n_prompts = 8;    // built-in prompts
  int64_t prompt_tokens = 16;
  std::vector<int64_t> m_sweep{1, 4, 16, 64};  // plus the captured M
  std::string act_quantizer = "vllm";
  bool allow_unverified = false;
  double max_flip_rate = -1;  // C7 tolerance; < 0: report only
  int64_t tolerance_ulps = 1; // C6
  // Arms that declare no epilogue formula are identified first (`qconform identify`), and an
  // identified formula is their declaration for the rest of conform (docs/identify.md).
  bool identify = true;
  // FP8 pairs (both arms declare an accumulation model, docs/accumulation.md) run the decoder in mode
  // w8a8-fp8 with this quantization, spelled as `generate --element/--act-scale/--weight-scale` (empty:
  // the default, e4m3 x e4m3 per token x per channel; an FP8 checkpoint's own weight scaling); given
  // with INT8 arms they are an input error.
  std::string element, act_scale, weight_scale;
  // FP8 pairs: the depth curve of the report (`sweep` of the pair on synthetic FP8 operands, with the
  // share of differences the declared models explain); empty `sweep_ks`: not run.
  std::vector<int64_t> sweep_ks{256, 512, 1024, 2048, 4096, 8192};
  int64_t sweep_m = 64, sweep_n = 256;
  int sweep_seeds = 3;
  // C8 end to end (docs/invariance.md), opt-in: each arm's captured layers over batch sizes and mates
  // (`qconform invariance`), and the model run again (generate and replay) with every linear layer's
  // rows inside batches of this many synthetic mates more (cycling from call to call), compared per
  // layer and per sequence with the runs alone (C7's statistics on the differences). Empty: not run.
  std::vector<int64_t> invariance_mates;
  // Where the mates come from: "prompts" (the rows the other prompts fed each layer in arm A's plain
  // generation: a prompt inside batches of other prompts) or "synthetic" (rows of the call's magnitude).
  std::string invariance_mates_from = "prompts";
  // C8 at a tensor-parallel degree (opt-in, 0: not run): the captured layers at TP 1 and this degree
  // (`qconform invariance --tp`), and the model run again with every linear layer as that many shards,
  // the row-parallel partials all-reduced by `invariance_reduction`, compared with the plain runs.
  int invariance_tp = 0;
  std::string invariance_reduction = "ring";
};

struct ConformOutcome {
  nlohmann::json results;  // the document written to results.json
  bool passed = false;     // every falsifiable check passed (and C0 verified)
  std::string report_path, results_path;
};

// `progress(step, total, what)` is called before each stage.
ConformOutcome run_conform(const ConformOptions& options,
                           const std::function<void(int, int, const std::string&)>& progress = {});

}  // namespace qc
