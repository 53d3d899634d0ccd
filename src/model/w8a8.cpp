// Mode `w8a8`: every linear layer of the decoder through one arm, on int8 operands quantized the
// way production engines quantize them (see the comment on `W8a8Linear` in model.hpp).
//
// Weights: per output channel, symmetric, compressed-tensors' `absmax/127.5` with half-even
// rounding (`quantize_weights_per_channel`, in the model's dtype), computed once per layer and
// cached by name; a compressed-tensors checkpoint's own int8 weights and scales are used as they
// are. Activations: per token, dynamic, with the chosen quantizer (`vllm` or `sglang`).
#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

#include "qconform/error.hpp"
#include "model/model.hpp"
#include "qconform/numerics.hpp"

namespace qc {

namespace {

// One layer's weight operands, shared by every call (and by captured operands, which keep it alive).
struct CachedWeight {
  std::string name;
  int64_t n = 0, k = 0;
  const float* source = nullptr;  // the fp32 weight it was computed from (detects a name reused for another layer)
  std::vector<int8_t> w_q;
  std::vector<float> w_scale;
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
    auto c = std::make_shared<CachedWeight>();
    c->name = layer.name;
    c->n = layer.n_out;
    c->k = layer.k_in;
    c->source = layer.weight.data();
    if (layer.quantized()) {
      // The checkpoint's own operands, bit for bit.
      c->w_q = layer.weight_q;
      c->w_scale = layer.weight_scale;
    } else {
      c->w_q.resize(static_cast<size_t>(layer.n_out * layer.k_in));
      c->w_scale.resize(static_cast<size_t>(layer.n_out));
      quantize_weights_per_channel(layer.weight.data(), layer.n_out, layer.k_in, c->w_q.data(), c->w_scale.data(),
                                   options.weight_dtype);
    }
    QC_CHECK(c->w_q.size() == static_cast<size_t>(layer.n_out * layer.k_in) &&
                 c->w_scale.size() == static_cast<size_t>(layer.n_out),
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
  state_->act = act_quantizer(options.act_quantizer);
  QC_INPUT(state_->act != ActQuantizer::static_,
           "--act-quantizer `static`: the model quantizes activations per token dynamically; expected `vllm`, "
           "`sglang` or `reciprocal`");
  state_->arm = make_arm(options.arm);
  state_->info = state_->arm->info();
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

void W8a8Linear::operator()(const LinearLayer& layer, const float* x, int64_t M, float* y) const {
  State& st = *state_;
  auto call = std::make_shared<CallOperands>();
  call->weight = st.weight_for(layer);
  call->a_q.resize(static_cast<size_t>(M * layer.k_in));
  call->a_scale.resize(static_cast<size_t>(M));
  quantize_activations(st.act, x, M, layer.k_in, call->a_q.data(), call->a_scale.data());

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
  ops.source = fmt::format("model run, w8a8 act={} pow2={}", st.options.act_quantizer, st.options.pow2);
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

}  // namespace qc
