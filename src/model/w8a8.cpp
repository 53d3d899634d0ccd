// Modes `w8a8` and `w8a8-fp8`: every linear layer of the decoder through one arm, on operands
// quantized the way production engines quantize them (see the comment on `W8a8Linear` in model.hpp).
//
// INT8 weights: per output channel, symmetric, compressed-tensors' `absmax/127.5` with half-even
// rounding (`quantize_weights_per_channel`, in the model's dtype). FP8 weights: compressed-tensors'
// "float-quantized" `absmax/fp8_max` per channel or per tensor (`quantize_weights_fp8`, in the model's
// dtype). Either is computed once per layer and cached by name; a compressed-tensors checkpoint's own
// codes and scales are used as they are. INT8 activations: per token, dynamic, with the chosen
// quantizer (`vllm`, `sglang` or `reciprocal`); FP8 activations: vLLM's dynamic FP8 path, per token
// or per tensor (`quantize_activations_fp8`).
#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

#include "epilogue/block_models.hpp"
#include "qconform/error.hpp"
#include "model/model.hpp"
#include "core/numerics_checked.hpp"
#include "qconform/numerics.hpp"

namespace qc {

namespace {

// One layer's weight operands, shared by every call (and by captured operands, which keep it alive).
struct CachedWeight {
  std::string name;
  int64_t n = 0, k = 0;
  const float* source = nullptr;  // the fp32 weight it was computed from (detects a name reused for another layer)
  ElementType type = ElementType::int8;
  std::vector<int8_t> w_q;  // int8 codes, or FP8 bit patterns when `type` is e4m3/e5m2
  std::vector<float> w_scale;
  ScaleLayout w_scaling = ScaleLayout::per_channel();  // block-scaled: the weight blocks
  std::vector<uint16_t> bias;  // bf16 bit patterns, empty when the layer has none
};

// Per-call bytes of one arm run; `keepalive` of the LayerOperands handed to the arm and observer.
struct CallOperands {
  std::shared_ptr<const CachedWeight> weight;
  std::vector<int8_t> a_q;
  std::vector<float> a_scale;
};

}  // namespace

struct W8a8Linear::State {
  W8a8Options options;
  ActQuantizer act = ActQuantizer::vllm;
  std::unique_ptr<Arm> arm;
  ArmInfo info;
  OperandObserver observer;
  std::string source;  // `LayerOperands::source` of every run
  std::mutex mutex;  // guards `cache` and `last_record`
  std::unordered_map<std::string, std::shared_ptr<const CachedWeight>> cache;
  RunRecord last_record;

  std::shared_ptr<const CachedWeight> weight_for(const LinearLayer& layer) {
    std::lock_guard lock(mutex);
    auto it = cache.find(layer.name);
    if (it != cache.end()) {
      const CachedWeight& c = *it->second;
      QC_CHECK(c.n == layer.n_out && c.k == layer.k_in && c.source == layer.weight.data(),
               "w8a8: layer name `{}` names two different layers ([{},{}] and [{},{}])", layer.name, c.n, c.k,
               layer.n_out, layer.k_in);
      return it->second;
    }
    check_checkpoint_takes_options(fmt::format("layer `{}`", layer.name), weight_storage(layer), !layer.bias.empty(),
                                   options);
    auto c = std::make_shared<CachedWeight>();
    c->name = layer.name;
    c->n = layer.n_out;
    c->k = layer.k_in;
    c->source = layer.weight.data();
    if (layer.quantized()) {
      // The checkpoint's own operands, bit for bit.
      c->type = layer.weight_type;
      c->w_q = layer.weight_q;
      c->w_scale = layer.weight_scale;
      if (layer.weight_blocks) c->w_scaling = *layer.weight_blocks;
    } else {
      c->w_q.resize(static_cast<size_t>(layer.n_out * layer.k_in));
      c->w_scale.resize(static_cast<size_t>(layer.n_out));
      if (options.fp8 && options.fp8->weight_blocks) {
        // Block-scaled: DeepGEMM's per_block_cast_to_fp8 (DeepSeek's published block quantizer).
        const ScaleLayout& b = *options.fp8->weight_blocks;
        c->type = options.fp8->weight;
        c->w_scaling = b;
        c->w_scale.resize(static_cast<size_t>(b.scale_count(layer.n_out, layer.k_in)));
        quantize_weights_fp8_blocks(c->type, BlockQuantizer::deepgemm, b.block_rows, b.block_k, b.ue8m0,
                                    layer.weight.data(), layer.n_out, layer.k_in,
                                    reinterpret_cast<uint8_t*>(c->w_q.data()), c->w_scale.data(), options.weight_dtype);
      } else if (options.fp8) {
        c->type = options.fp8->weight;
        quantize_weights_fp8(c->type, options.fp8->weight_scaling, layer.weight.data(), layer.n_out, layer.k_in,
                             reinterpret_cast<uint8_t*>(c->w_q.data()), c->w_scale.data(), options.weight_dtype);
      } else {
        quantize_weights_per_channel(layer.weight.data(), layer.n_out, layer.k_in, c->w_q.data(), c->w_scale.data(),
                                     options.weight_dtype);
      }
    }
    QC_CHECK(c->w_q.size() == static_cast<size_t>(layer.n_out * layer.k_in) &&
                 static_cast<int64_t>(c->w_scale.size()) == c->w_scaling.scale_count(layer.n_out, layer.k_in),
             "w8a8: layer `{}` has inconsistent quantized weights", layer.name);
    if (options.pow2) {
      // The probe: each scale to its nearest power of two in log2 (a scale never leaves [s/√2, s·√2]).
      for (float& s : c->w_scale) s = pow2_nearest_log2(s);
    }
    for (float b : layer.bias) c->bias.push_back(f32_to_bf16(b));
    cache.emplace(layer.name, c);
    return c;
  }
};

W8a8Linear::W8a8Linear(W8a8Options options) : state_(std::make_shared<State>()) {
  const bool block = options.fp8 && options.fp8->block_scaled();
  if (options.arm.empty()) options.arm = std::string(default_arm(linear_mode(options), block));
  state_->act = act_quantizer(options.act_quantizer);
  QC_INPUT(state_->act != ActQuantizer::static_,
           "--act-quantizer `static`: the model quantizes activations per token dynamically; expected `vllm`, "
           "`sglang` or `reciprocal`");
  if (const std::optional<Fp8Quantization>& f = options.fp8) {
    QC_INPUT(options.act_quantizer == "vllm",
             "--act-quantizer `{}` in mode w8a8-fp8: expected vllm (vLLM's dynamic FP8 path is the one modelled; "
             "sglang and reciprocal are INT8 quantizers)",
             options.act_quantizer);
    QC_INPUT(f->act != ElementType::int8 && f->weight != ElementType::int8,
             "--element `{}` in mode w8a8-fp8: expected FP8 element types (e4m3, e5m2, e5m2-e4m3 or e4m3-e5m2), "
             "found int8 (use --mode w8a8)",
             element_types_spec(f->act, f->weight));
  }
  state_->arm = make_arm(options.arm);
  state_->info = state_->arm->info();
  if (options.fp8) {
    QC_INPUT(state_->info.fp8(),
             "--arm `{}` in mode w8a8-fp8: expected an FP8 arm (an FP8 element or an accumulation model: "
             "{}; `qconform arms` lists them), found an INT8 arm",
             options.arm, fp8_arm_families(Fp8Families::all));
    const Fp8Quantization& f = *options.fp8;
    const bool block_arm = state_->info.block();
    QC_INPUT(block_arm == block,
             "--arm `{}` in mode w8a8-fp8 with --act-scale {} --weight-scale {}: expected {} (`qconform arms` lists "
             "them), found {} arm (accumulation model {})",
             options.arm, f.act_scale_spec(), f.weight_scale_spec(),
             block ? fmt::format("a block-scaled FP8 arm, {}, for block-scaled operands", fp8_arm_families(Fp8Families::block))
                   : fmt::format("an FP8 arm of an unscaled model ({})", fp8_arm_families(Fp8Families::unscaled)),
             block_arm ? "a block-scaled" : "an unscaled FP8", state_->info.accumulation_model);
    state_->source = fmt::format("model run, w8a8-fp8 element={} act_scale={} weight_scale={} pow2={}",
                                 element_types_spec(f.act, f.weight), f.act_scale_spec(), f.weight_scale_spec(),
                                 options.pow2);
  } else {
    QC_INPUT(!state_->info.fp8(),
             "--arm `{}` in mode w8a8: expected an INT8 arm, found an FP8 arm (accumulation model `{}`); mode w8a8 "
             "quantizes to INT8: use --mode w8a8-fp8 to run FP8 operands through it",
             options.arm, state_->info.fp8_model_unknown() ? std::string("unknown") : state_->info.accumulation_model);
    state_->source = fmt::format("model run, w8a8 act={} pow2={}", options.act_quantizer, options.pow2);
  }
  state_->options = std::move(options);
}

void W8a8Linear::set_observer(OperandObserver observer) { state_->observer = std::move(observer); }
const W8a8Options& W8a8Linear::options() const { return state_->options; }
ArmInfo W8a8Linear::arm_info() const { return state_->info; }
RunRecord W8a8Linear::last_record() const {
  std::lock_guard lock(state_->mutex);
  return state_->last_record;
}

WeightScaleDtype weight_scale_dtype_for(const ModelConfig& config) {
  return config.dtype == "bf16" ? WeightScaleDtype::bf16 : WeightScaleDtype::f32;
}

std::string WeightStorage::describe() const {
  if (!quantized) return "unquantized";
  if (blocks) return fmt::format("block-scaled FP8 ({}, {} scales)", element_type_name(type), blocks->spec());
  return fmt::format("compressed-tensors {} ({}, {} scales)", type == ElementType::int8 ? "int-quantized" : "float-quantized",
                     element_type_name(type), to_string(scaling));
}

WeightStorage weight_storage(const LinearLayer& layer) {
  if (!layer.quantized()) return {};
  return {true, layer.weight_type, layer.weight_scaling, layer.weight_blocks};
}

WeightStorage weight_storage(const Model& model) {
  return model.layers.empty() ? WeightStorage{} : weight_storage(model.layers[0].q);
}

void check_checkpoint_takes_options(const std::string& where, const WeightStorage& weights, bool has_bias,
                                    const W8a8Options& options) {
  const bool ckpt_fp8 = weights.quantized && weights.type != ElementType::int8;
  if (!options.fp8) {
    QC_INPUT(!ckpt_fp8,
             "{}: mode w8a8 quantizes to INT8; expected an unquantized or int-quantized checkpoint, found {} (use "
             "--mode w8a8-fp8)",
             where, weights.describe());
    return;
  }
  QC_INPUT(!has_bias,
           "{}: mode w8a8-fp8: expected no q/k/v bias (the FP8 arms take no bias), found one (a Qwen2 model?); run it "
           "with --mode w8a8 or fp32",
           where);
  QC_INPUT(!weights.quantized || ckpt_fp8,
           "{}: mode w8a8-fp8: expected an unquantized or float-quantized (FP8) checkpoint, found {} (use --mode w8a8)",
           where, weights.describe());
  if (!ckpt_fp8) return;
  const Fp8Quantization& f = *options.fp8;
  QC_INPUT(f.weight == weights.type,
           "{}: --element `{}`: expected weights of the checkpoint's element type {}, found {} (the checkpoint stores "
           "its own codes: {})",
           where, element_types_spec(f.act, f.weight), element_type_name(weights.type), element_type_name(f.weight),
           weights.describe());
  const std::string stored = weights.blocks ? weights.blocks->spec() : std::string(to_string(weights.scaling));
  QC_INPUT(f.weight_blocks == weights.blocks && (weights.blocks || f.weight_scaling == weights.scaling),
           "{}: --weight-scale `{}`: expected the checkpoint's weight scaling {}, found {} (the checkpoint stores its "
           "own scales: {})",
           where, f.weight_scale_spec(), stored, f.weight_scale_spec(), weights.describe());
}

void W8a8Linear::operator()(const LinearLayer& layer, const float* x, int64_t M, float* y) const {
  State& st = *state_;
  auto call = std::make_shared<CallOperands>();
  call->weight = st.weight_for(layer);
  call->a_q.resize(static_cast<size_t>(M * layer.k_in));
  call->a_scale.resize(static_cast<size_t>(M));
  const std::optional<Fp8Quantization>& fp8 = st.options.fp8;
  if (fp8 && fp8->act_blocks) {
    // Block-scaled: vLLM's per_token_group_quant_fp8, a_scale [M, ceil(K/g)].
    const ScaleLayout& g = *fp8->act_blocks;
    call->a_scale.resize(static_cast<size_t>(g.scale_count(M, layer.k_in)));
    quantize_activations_fp8_groups(fp8->act, GroupQuantizer::vllm, g.block_k, g.ue8m0, x, M, layer.k_in,
                                    reinterpret_cast<uint8_t*>(call->a_q.data()), call->a_scale.data());
  } else if (fp8) {
    quantize_activations_fp8(fp8->act, fp8->act_scaling, x, M, layer.k_in, reinterpret_cast<uint8_t*>(call->a_q.data()),
                             call->a_scale.data());
  } else {
    quantize_activations(st.act, x, M, layer.k_in, call->a_q.data(), call->a_scale.data());
  }

  const CachedWeight& w = *call->weight;
  LayerOperands ops;
  ops.name = layer.name;
  ops.m = M;
  ops.n = layer.n_out;
  ops.k = layer.k_in;
  ops.a_q = call->a_q;
  ops.a_scale = call->a_scale;
  ops.w_q = w.w_q;
  ops.w_scale = w.w_scale;
  ops.bias = w.bias;
  ops.a_type = fp8 ? fp8->act : ElementType::int8;
  ops.w_type = w.type;
  if (fp8 && fp8->act_blocks) {
    ops.a_scaling = *fp8->act_blocks;
  } else if (fp8 && fp8->act_scaling == Fp8ActScaling::per_tensor) {
    ops.a_scaling = ScaleLayout::per_tensor();
  }
  ops.w_scaling = w.w_scaling;
  if (!w.w_scaling.k_blocked() && fp8 && fp8->weight_scaling == WeightScaling::per_tensor) {
    ops.w_scaling = ScaleLayout::per_tensor();
  }
  ops.source = st.source;
  ops.keepalive = call;

  ArmOutput out = st.arm->run(ops);
  QC_CHECK(out.y.size() == static_cast<size_t>(M * layer.n_out), "arm {} returned {} outputs for layer `{}`, expected {}",
           st.options.arm, out.y.size(), layer.name, M * layer.n_out);
  for (size_t i = 0; i < out.y.size(); ++i) y[i] = bf16_to_f32(out.y[i]);
  {
    std::lock_guard lock(st.mutex);
    st.last_record = out.record;
  }
  if (st.observer) st.observer(ops, out);
}

Fp8Quantization fp8_quantization(std::string_view element, std::string_view act_scale, std::string_view weight_scale,
                                 const WeightStorage& checkpoint) {
  Fp8Quantization f;
  if (!element.empty()) std::tie(f.act, f.weight) = parse_element_types(element);
  // The granularities: a per-token-group activation scale and a per-block weight scale come together
  // (block-scaled FP8); the others are vLLM's dynamic FP8 and compressed-tensors' FP8 scalings.
  // Without --act-scale, a block-scaled checkpoint's activations go in groups of its K block (as its
  // `input_activations` / DeepSeek's 1x128 say).
  const ScaleLayout a = !act_scale.empty() ? parse_scale_layout(act_scale, false, "--act-scale")
                        : checkpoint.blocks ? ScaleLayout::token_group(checkpoint.blocks->block_k)
                                            : ScaleLayout::per_token();
  std::optional<ScaleLayout> w;
  if (!weight_scale.empty()) {
    w = parse_scale_layout(weight_scale, true, "--weight-scale");
  } else if (checkpoint.blocks) {
    w = checkpoint.blocks;  // a block-scaled checkpoint's own blocks
  }
  const bool block = a.k_blocked() || (w && w->k_blocked());
  if (block) {
    QC_INPUT(a.k_blocked() && w && w->k_blocked() && a.block_k == w->block_k,
             "--act-scale {} --weight-scale {}: block-scaled FP8 takes per-token-group activation scales and per-block "
             "weight scales that cut K alike (e.g. per-token-group:128 with per-block:128x128)",
             act_scale.empty() ? "per-token" : act_scale, w ? w->spec() : std::string("per-channel"));
    QC_INPUT(f.act == ElementType::e4m3 && f.weight == ElementType::e4m3,
             "--element {}: block-scaled FP8 is e4m3 x e4m3 (the block quantizers write float8_e4m3fn)",
             element_types_spec(f.act, f.weight));
    f.act_blocks = a;
    f.weight_blocks = w;
    return f;
  }
  if (!act_scale.empty()) f.act_scaling = parse_fp8_act_scaling(act_scale);
  if (!weight_scale.empty()) {
    f.weight_scaling = parse_weight_scaling(weight_scale);
  } else if (checkpoint.quantized && checkpoint.type != ElementType::int8) {
    f.weight_scaling = checkpoint.scaling;  // an FP8 checkpoint's own scales
  }
  return f;
}

nlohmann::json fp8_run_config(const W8a8Options& o) {
  QC_CHECK(o.fp8.has_value(), "fp8_run_config: the options are not FP8");
  const Fp8Quantization& f = *o.fp8;
  return {{"act_quantizer", o.act_quantizer},
          {"element", element_types_spec(f.act, f.weight)},
          {"act_scale", f.act_scale_spec()},
          {"weight_scale", f.weight_scale_spec()}};
}

}  // namespace qc
