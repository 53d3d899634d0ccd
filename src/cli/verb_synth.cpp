// `qconform synth`: synthetic operands with realistic statistics, for running the layer-level
// experiment with no model at hand.
#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "cli/cli.hpp"
#include "core/fileio.hpp"
#include "cli/distributed.hpp"
#include "cli/lists.hpp"
#include "core/operands_io.hpp"
#include "core/sha256.hpp"
#include "synth/synth.hpp"

namespace qc::cli {
namespace {

VerbRunner setup_synth(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  auto out = std::make_shared<std::string>();
  app.add_option("--shapes", o->shapes, "qwen3-1.7b, qwen3-8b, llama3-70b, tiny, MxNxK, or a comma-separated list of MxNxK with one M (layer0, layer1, ...)")->capture_default_str();
  add_positive_option(app, "--m", o->m, "rows (tokens) per layer; ignored for MxNxK");
  add_non_negative_option(app, "--seed", o->seed, "seed of the deterministic generator");
  app.add_flag("--bias", o->bias, "add a bf16 bias per output channel");
  app.add_option("--act-quantizer", o->act_quantizer,
                 "activation quantizer: vllm, sglang, reciprocal (INT8); vllm (FP8 per token or tensor); vllm, sglang, "
                 "deepgemm (FP8 per-token-group: their per_token_group_quant_fp8 / per_token_cast_to_fp8)")
      ->capture_default_str();
  app.add_option("--element", o->element,
                 "element types, activations-weights: int8, e4m3, e5m2, e5m2-e4m3 (FP8: vLLM's dynamic per-token "
                 "FP8 activations, compressed-tensors' per-channel FP8 weights)")
      ->capture_default_str();
  app.add_option("--act-scale", o->act_scale,
                 "FP8 activation scales: per-token or per-tensor (vLLM's dynamic paths), or per-token-group:<g> "
                 "(block-scaled FP8: one scale per token and g columns of K, a_scale [M, ceil(K/g)])")
      ->capture_default_str();
  app.add_option("--weight-scale", o->weight_scale,
                 "FP8 weight scales: per-channel or per-tensor (compressed-tensors; per tensor stored as N equal "
                 "entries), or per-block:<rows>x<cols> (block-scaled FP8, w_scale [ceil(N/rows), ceil(K/cols)])")
      ->capture_default_str();
  app.add_option("--weight-quantizer", o->weight_quantizer,
                 "per-block FP8 weights: deepgemm (per_block_cast_to_fp8) or compressed-tensors (strategy block)")
      ->capture_default_str();
  app.add_flag("--ue8m0", o->ue8m0,
               "block-scaled FP8: every scale rounded up to a power of two (UE8M0, DeepSeek-V3.1's scale_fmt)");
  app.add_option("--outlier-fraction", o->outlier_fraction, "share of heavy outlier activation channels")
      ->capture_default_str()
      ->check(finite_in(0, 1));
  app.add_option("--outlier-gain", o->outlier_gain, "outlier channel magnitude relative to the others")
      ->capture_default_str()
      ->check(finite_in(0x1p-126, 3.4e38));
  app.add_option("--layers", o->max_layers, "write only the first N layers of the preset (0: all)")
      ->check(non_negative_integer(o->max_layers));
  auto shard_size = std::make_shared<std::string>();
  add_shard_size_option(app, *shard_size);
  app.add_option("--out", *out, "output operands file (safetensors; with --shard-size, the index NAME.index.json)")
      ->required();
  return [o, out, shard_size] {
    check_output_paths({}, {{"--out", *out}});
    const auto start = std::chrono::steady_clock::now();
    int64_t macs = 0, m = 0;
    size_t count = 0;
    const auto metadata = [&](int64_t rows) {
      if (o->element == "int8") {  // the INT8 file's bytes stay what they were before FP8 synth existed
        return std::map<std::string, std::string>{{"source", "qconform synth"},
                                                  {"shapes", o->shapes},
                                                  {"m", std::to_string(rows)},
                                                  {"seed", std::to_string(o->seed)},
                                                  {"act_quantizer", o->act_quantizer},
                                                  {"weight_quantizer", "compressed-tensors absmax/127.5 half-even"}};
      }
      return std::map<std::string, std::string>{
          {"source", "qconform synth"},
          {"shapes", o->shapes},
          {"m", std::to_string(rows)},
          {"seed", std::to_string(o->seed)},
          {"element", o->element},
          {"act_quantizer", synth_act_quantizer_description(*o)},
          {"weight_quantizer", synth_weight_quantizer_description(*o)}};
    };
    std::string shards;
    if (shard_size->empty()) {
      const std::vector<LayerOperands> layers = synth_operands(*o);
      save_operands(*out, layers, metadata(layers.front().m));
      for (const LayerOperands& l : layers) macs += l.m * l.n * l.k;
      count = layers.size(), m = layers.front().m;
    } else {
      // Layer by layer into shards: what is in memory is one shard and the layers being made.
      std::optional<ShardedOperandWriter> writer;
      synth_operands_each(*o, [&](LayerOperands l) {
        if (!writer) writer.emplace(*out, metadata(l.m), parse_byte_size("--shard-size", *shard_size));
        macs += l.m * l.n * l.k, m = l.m, ++count;
        writer->add(std::move(l));
      });
      writer->finish();
      shards = fmt::format(" in {} shards", writer->shard_count());
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto [a_type, w_type] = parse_element_types(o->element);
    fmt::print("wrote {} {} x {} layers ({} M, {:.3f} T multiply-adds) to {}{} in {:.1f} s\n{}\n", count,
               element_type_name(a_type), element_type_name(w_type), m, static_cast<double>(macs) * 1e-12, *out, shards,
               seconds, sha256_file(*out));
    return kExitOk;
  };
}

RegisterVerb register_synth{{"synth", "Write synthetic W8A8 (INT8 or FP8) operands with realistic statistics", 20, setup_synth}};

}  // namespace
}  // namespace qc::cli
