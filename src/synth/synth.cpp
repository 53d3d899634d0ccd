#include "synth/synth.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <thread>
#include <tuple>

#include "qconform/error.hpp"
#include "core/limits.hpp"
#include "qconform/numerics.hpp"
#include "core/parallel.hpp"
#include "epilogue/quantize.hpp"

namespace qc {

namespace {

struct ModelDims {
  int64_t hidden, intermediate, layers, q_heads, kv_heads, head_dim;
};

std::vector<LayerShape> decoder_layers(const ModelDims& d) {
  std::vector<LayerShape> out;
  const int64_t q = d.q_heads * d.head_dim, kv = d.kv_heads * d.head_dim;
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    out.push_back({p + "self_attn.q_proj", q, d.hidden});
    out.push_back({p + "self_attn.k_proj", kv, d.hidden});
    out.push_back({p + "self_attn.v_proj", kv, d.hidden});
    out.push_back({p + "self_attn.o_proj", d.hidden, q});
    out.push_back({p + "mlp.gate_proj", d.intermediate, d.hidden});
    out.push_back({p + "mlp.up_proj", d.intermediate, d.hidden});
    out.push_back({p + "mlp.down_proj", d.hidden, d.intermediate});
  }
  return out;
}

int64_t parse_dim(std::string_view text, std::string_view spec) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  QC_INPUT(ec == std::errc() && ptr == text.data() + text.size() && v > 0,
           "--shapes `{}`: expected qwen3-1.7b, qwen3-8b, llama3-70b, tiny or MxNxK with positive integers", spec);
  return v;
}

// One standard-normal-like sample from one 64-bit draw: Irwin–Hall sum of four 16-bit uniforms,
// centred and scaled to unit variance (exact integer arithmetic, then one fp64 scaling).
double normal_from(uint64_t r) {
  const int64_t s = static_cast<int64_t>(r & 0xFFFF) + static_cast<int64_t>((r >> 16) & 0xFFFF) +
                    static_cast<int64_t>((r >> 32) & 0xFFFF) + static_cast<int64_t>(r >> 48);
  // Var of one uniform integer on [0, 65535] is (65536^2 - 1)/12; four of them sum to 4x that.
  constexpr double kSd = 37837.22668;  // sqrt(4 * (65536^2 - 1) / 12)
  return (static_cast<double>(s) - 131070.0) / kSd;
}

uint64_t stream_seed(uint64_t seed, size_t layer, uint64_t which) {
  uint64_t state = seed ^ (0xA24BAED4963EE407ull * (layer + 1)) ^ (which << 56);
  splitmix64(state);
  return state;
}

// The scale layouts the options ask for (validated by `checked_spec` before any work).
std::pair<ScaleLayout, ScaleLayout> synth_layouts(const SynthOptions& o) {
  ScaleLayout a = parse_scale_layout(o.act_scale, /*weights=*/false, "--act-scale");
  ScaleLayout w = parse_scale_layout(o.weight_scale, /*weights=*/true, "--weight-scale");
  a.ue8m0 = w.ue8m0 = o.ue8m0;
  return {a, w};
}

LayerOperands synth_layer(const LayerShape& shape, size_t index, int64_t m, const SynthOptions& o) {
  OperandStorage s;
  std::tie(s.a_type, s.w_type) = parse_element_types(o.element);
  std::tie(s.a_scaling, s.w_scaling) = synth_layouts(o);
  // Activations: per-channel magnitudes with a few heavy outlier channels (as in LLM hidden states).
  std::vector<float> x(static_cast<size_t>(m * shape.k));
  std::vector<double> channel_gain(static_cast<size_t>(shape.k), 1.0);
  uint64_t st = stream_seed(o.seed, index, 1);
  for (int64_t c = 0; c < shape.k; ++c) {
    const double u = static_cast<double>(splitmix64(st) >> 11) * 0x1p-53;
    if (u < o.outlier_fraction) channel_gain[c] = o.outlier_gain;
  }
  st = stream_seed(o.seed, index, 2);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < shape.k; ++c) {
      x[r * shape.k + c] = static_cast<float>(normal_from(splitmix64(st)) * channel_gain[c]);
    }
  }
  s.a_q.resize(x.size());
  s.a_scale.resize(static_cast<size_t>(s.a_scaling.scale_count(m, shape.k)));
  uint8_t* a_codes = reinterpret_cast<uint8_t*>(s.a_q.data());
  if (s.a_type == ElementType::int8) {
    quantize_activations(act_quantizer(o.act_quantizer), x.data(), m, shape.k, s.a_q.data(), s.a_scale.data());
  } else if (s.a_scaling.k_blocked()) {
    quantize_activations_fp8_groups(s.a_type, group_quantizer(o.act_quantizer, "--act-quantizer"), s.a_scaling.block_k,
                                    o.ue8m0, x.data(), m, shape.k, a_codes, s.a_scale.data());
  } else {
    quantize_activations_fp8(s.a_type, parse_fp8_act_scaling(o.act_scale), x.data(), m, shape.k, a_codes,
                             s.a_scale.data());
  }

  std::vector<float> w(static_cast<size_t>(shape.n * shape.k));
  st = stream_seed(o.seed, index, 3);
  for (float& v : w) v = static_cast<float>(normal_from(splitmix64(st)) * o.weight_sigma);
  s.w_q.resize(w.size());
  s.w_scale.resize(static_cast<size_t>(s.w_scaling.scale_count(shape.n, shape.k)));
  uint8_t* w_codes = reinterpret_cast<uint8_t*>(s.w_q.data());
  if (s.w_type == ElementType::int8) {
    quantize_weights_per_channel(w.data(), shape.n, shape.k, s.w_q.data(), s.w_scale.data());
  } else if (s.w_scaling.k_blocked()) {
    quantize_weights_fp8_blocks(s.w_type, block_quantizer(o.weight_quantizer, "--weight-quantizer"),
                                s.w_scaling.block_rows, s.w_scaling.block_k, o.ue8m0, w.data(), shape.n, shape.k,
                                w_codes, s.w_scale.data());
  } else {
    quantize_weights_fp8(s.w_type, parse_weight_scaling(o.weight_scale), w.data(), shape.n, shape.k, w_codes,
                         s.w_scale.data());
  }

  if (o.bias) {
    st = stream_seed(o.seed, index, 4);
    s.bias.resize(static_cast<size_t>(shape.n));
    for (uint16_t& b : s.bias) b = f32_to_bf16(static_cast<float>(normal_from(splitmix64(st)) * 0.5));
  }
  return make_operands(shape.name, m, shape.n, shape.k, std::move(s),
                       s.a_type == ElementType::int8
                           ? fmt::format("synth shapes={} m={} seed={}", o.shapes, m, o.seed)
                           : fmt::format("synth shapes={} m={} seed={} element={} act_scale={} weight_scale={}{}", o.shapes,
                                         m, o.seed, o.element, o.act_scale, o.weight_scale, o.ue8m0 ? " ue8m0" : ""));
}

}  // namespace

std::string synth_act_quantizer_description(const SynthOptions& o) {
  if (o.element == "int8") return o.act_quantizer;
  const ScaleLayout a = synth_layouts(o).first;
  return a.k_blocked() ? group_quantizer_description(group_quantizer(o.act_quantizer, "--act-quantizer"), o.ue8m0)
                       : fp8_act_quantizer_description(parse_fp8_act_scaling(o.act_scale));
}

std::string synth_weight_quantizer_description(const SynthOptions& o) {
  if (o.element == "int8") return "compressed-tensors absmax/127.5 half-even";
  const ScaleLayout w = synth_layouts(o).second;
  return w.k_blocked() ? block_quantizer_description(block_quantizer(o.weight_quantizer, "--weight-quantizer"), o.ue8m0)
                       : fp8_weight_quantizer_description(parse_weight_scaling(o.weight_scale));
}

ShapeSpec parse_shapes(std::string_view spec) {
  ShapeSpec out;
  if (spec == "qwen3-1.7b") {
    out.layers = decoder_layers({2048, 6144, 28, 16, 8, 128});
  } else if (spec == "qwen3-8b") {
    out.layers = decoder_layers({4096, 12288, 36, 32, 8, 128});
  } else if (spec == "llama3-70b") {
    out.layers = decoder_layers({8192, 28672, 80, 64, 8, 128});
  } else if (spec == "tiny") {
    out.layers = decoder_layers({256, 768, 2, 4, 2, 64});
  } else {
    // MxNxK, or a comma-separated list of them with one M (layers layer0, layer1, ... in that order).
    size_t start = 0;
    while (true) {
      const size_t comma = spec.find(',', start);
      const std::string_view one = spec.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
      const size_t x1 = one.find('x'), x2 = one.find('x', x1 == std::string_view::npos ? x1 : x1 + 1);
      QC_INPUT(x1 != std::string_view::npos && x2 != std::string_view::npos,
               "--shapes `{}`: expected qwen3-1.7b, qwen3-8b, llama3-70b, tiny, MxNxK (e.g. 512x4096x4096) or a "
               "comma-separated list of MxNxK with one M, found `{}`",
               spec, one);
      const int64_t m = parse_dim(one.substr(0, x1), spec);
      QC_INPUT(out.m_override == 0 || m == out.m_override,
               "--shapes `{}`: every MxNxK of a list must have the same M (the rows of an operand file), found {} and {}",
               spec, out.m_override, m);
      out.m_override = m;
      out.layers.push_back({fmt::format("layer{}", out.layers.size()), parse_dim(one.substr(x1 + 1, x2 - x1 - 1), spec),
                            parse_dim(one.substr(x2 + 1), spec)});
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

namespace {

ShapeSpec checked_spec(const SynthOptions& options, int64_t& m) {
  ShapeSpec spec = parse_shapes(options.shapes);
  m = spec.m_override > 0 ? spec.m_override : options.m;
  QC_INPUT(m > 0, "--m: expected a positive number of rows, found {}", m);
  QC_INPUT(options.max_layers >= 0, "--layers: expected a non-negative count, found {}", options.max_layers);
  if (options.max_layers > 0 && static_cast<size_t>(options.max_layers) < spec.layers.size()) {
    spec.layers.resize(static_cast<size_t>(options.max_layers));
  }
  // The spellings and their combinations, validated before any work.
  const auto [a_type, w_type] = parse_element_types(options.element);
  const auto [a_layout, w_layout] = synth_layouts(options);
  QC_INPUT(a_type != ElementType::int8 || (options.act_scale == "per-token" && options.weight_scale == "per-channel"),
           "--act-scale {} --weight-scale {} with --element int8: expected per-token and per-channel (the other "
           "granularities are FP8 quantizers)",
           options.act_scale, options.weight_scale);
  if (a_layout.k_blocked()) {
    group_quantizer(options.act_quantizer, "--act-quantizer");
  } else {
    act_quantizer(options.act_quantizer);
    QC_INPUT(a_type == ElementType::int8 || options.act_quantizer == "vllm",
             "--act-quantizer `{}` with --element {} --act-scale {}: expected vllm (FP8 activations per token or per "
             "tensor are quantized by vLLM's dynamic FP8 quantizer; the others are INT8 quantizers)",
             options.act_quantizer, options.element, options.act_scale);
  }
  if (w_layout.k_blocked()) block_quantizer(options.weight_quantizer, "--weight-quantizer");
  QC_INPUT(!(a_layout.k_blocked() || w_layout.k_blocked()) || (a_type == ElementType::e4m3 && w_type == ElementType::e4m3),
           "--element {} with --act-scale {} --weight-scale {}: expected e4m3 (the block-scaled FP8 quantizers of vLLM, "
           "SGLang and DeepGEMM write float8_e4m3fn)",
           options.element, options.act_scale, options.weight_scale);
  QC_INPUT(!a_layout.k_blocked() || !w_layout.k_blocked() || a_layout.block_k == w_layout.block_k,
           "--act-scale {} --weight-scale {}: expected the activation groups and the weight blocks to cut K alike "
           "(e.g. per-token-group:128 with per-block:128x128)",
           options.act_scale, options.weight_scale);
  QC_INPUT(!options.ue8m0 || (a_layout.k_blocked() && w_layout.k_blocked()),
           "--ue8m0 with --act-scale {} --weight-scale {}: expected per-token-group and per-block scales (UE8M0 scales "
           "are a format of the block-scaled quantizers)",
           options.act_scale, options.weight_scale);
  QC_INPUT(!options.ue8m0 || options.weight_quantizer == "deepgemm",
           "--ue8m0 with --weight-quantizer {}: expected deepgemm (compressed-tensors has no UE8M0 scale format)",
           options.weight_quantizer);
  // NaN fails every comparison: each parameter is checked for what it must be, not for what it must not.
  QC_INPUT(options.outlier_fraction >= 0.0 && options.outlier_fraction <= 1.0,
           "--outlier-fraction: expected a share in [0, 1], found {}", options.outlier_fraction);
  QC_INPUT(options.outlier_gain > 0.0 && std::isfinite(options.outlier_gain),
           "--outlier-gain: expected a finite magnitude > 0, found {}", options.outlier_gain);
  QC_INPUT(options.weight_sigma > 0.0 && std::isfinite(options.weight_sigma),
           "weight sigma: expected a finite standard deviation > 0, found {}", options.weight_sigma);
  QC_INPUT(options.threads >= 0, "--threads: expected 0 (all cores) or a positive count, found {}", options.threads);
  return spec;
}

// Memory before allocating: the operands of the layers held at once (every layer for
// `synth_operands`, one for the streaming `synth_operands_each`), plus one fp32 activation and
// weight matrix per worker while a layer is generated.
void check_synth_memory(const SynthOptions& options, const ShapeSpec& spec, int64_t m, bool all_layers_held) {
  double held = 0, largest = 0, transient = 0;
  for (const LayerShape& l : spec.layers) {
    const double md = static_cast<double>(m), nd = static_cast<double>(l.n), kd = static_cast<double>(l.k);
    const double bytes = md * kd + nd * kd + 4 * md * (1 + kd / 64) + 6 * nd + 4 * nd * (kd / 64);  // scales of any layout
    held += bytes;
    largest = std::max(largest, bytes);
    transient = std::max(transient, 4 * (md * kd + nd * kd));
  }
  const unsigned workers = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                                          static_cast<unsigned>(spec.layers.size())));
  check_memory_estimate((all_layers_held ? held : workers * largest) + workers * transient,
                        fmt::format("--shapes {} --m {} ({} layers)", options.shapes, m, spec.layers.size()));
}

}  // namespace

std::vector<LayerOperands> synth_operands(const SynthOptions& options) {
  int64_t m = 0;
  const ShapeSpec spec = checked_spec(options, m);
  check_synth_memory(options, spec, m, /*all_layers_held=*/true);
  std::vector<LayerOperands> layers(spec.layers.size());
  parallel_for(static_cast<int64_t>(layers.size()), options.threads,
               [&](int64_t i) { layers[i] = synth_layer(spec.layers[i], static_cast<size_t>(i), m, options); });
  return layers;
}

void synth_operands_each(const SynthOptions& options, const std::function<void(LayerOperands)>& sink) {
  int64_t m = 0;
  const ShapeSpec spec = checked_spec(options, m);
  check_synth_memory(options, spec, m, /*all_layers_held=*/false);
  const size_t batch = static_cast<size_t>(resolve_threads(options.threads));
  for (size_t first = 0; first < spec.layers.size(); first += batch) {
    std::vector<LayerOperands> layers(std::min(batch, spec.layers.size() - first));
    parallel_for(static_cast<int64_t>(layers.size()), options.threads, [&](int64_t i) {
      layers[i] = synth_layer(spec.layers[first + i], first + static_cast<size_t>(i), m, options);
    });
    for (LayerOperands& l : layers) sink(std::move(l));
  }
}

}  // namespace qc
