// C8's claims: what one run's record says it computed for its shape, evaluated on the layer's own
// exact accumulators (INT8) or codes (FP8), and the batches C8 builds (c8_invariance.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "accum/fp8_model.hpp"
#include "epilogue/block_models.hpp"
#include "checks/c8_invariance.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"

namespace qc::invariance_detail {

namespace {

const nlohmann::json* extra_string(const RunRecord& r, const char* key) {
  if (!r.extra.is_object() || !r.extra.contains(key) || !r.extra[key].is_string()) return nullptr;
  return &r.extra[key];
}

}  // namespace

// The "epilogue" of a block model's claim: y = bf16(D) rounded to nearest even (the block arms' output).
constexpr std::string_view kBlockOutput = "bf16(D)";

struct ClaimPredictor::Impl {
  ArmInfo info;
  LayerOperands ops;
  std::once_flag acc_once;
  ExactAccumulators acc;
  std::unique_ptr<Fp8LayerCodes> codes;
  std::map<std::string, std::vector<float>> models;  // fp32 accumulators per claimed model

  // INT8: the formula name, FP8: {model, epilogue}; "" with why_not when nothing is claimed.
  std::string int8_formula(const RunRecord& r, bool use_records, std::string& why_not) const {
    if (use_records) {
      if (const nlohmann::json* inst = extra_string(r, "epilogue_instance")) return inst->get<std::string>();
      if (!r.epilogue.empty()) return r.epilogue;
    }
    if (!info.epilogue.empty()) return info.epilogue;
    why_not = fmt::format("arm {} declares no formula (declare one: verify --declare, or identify)", info.label);
    return "";
  }
  std::pair<std::string, std::string> fp8_claim(const RunRecord& r, bool use_records, std::string& why_not) const {
    std::string model;
    if (use_records && r.extra.is_object() && r.extra.contains("accumulation_model")) {
      const auto& m = r.extra["accumulation_model"];
      if (m.is_string()) {
        model = m.get<std::string>();
      } else {
        why_not = fmt::format("the run record claims no accumulation model{}",
                              r.extra.contains("accumulation_model_refused")
                                  ? ": " + r.extra["accumulation_model_refused"].dump()
                                  : std::string());
        return {};
      }
    }
    if (model.empty()) model = info.accumulation_model;
    if (model.empty()) {
      why_not = fmt::format("arm {} declares no accumulation model (measure one: qconform identify)", info.label);
      return {};
    }
    if (ops.block_scaled() != is_block_model_name(model)) {
      why_not = fmt::format("layer `{}` is {}block-scaled and the claimed model {} is {}a block model", ops.name,
                            ops.block_scaled() ? "" : "not ", model, ops.block_scaled() ? "not " : "");
      return {};
    }
    // A block model's scales act inside it: its output is bf16(D), no epilogue of the table.
    if (ops.block_scaled()) return {model, std::string(kBlockOutput)};
    std::string epi = use_records && !r.epilogue.empty() ? r.epilogue : info.epilogue;
    if (epi.empty()) epi = std::string(fp8_epilogue().name);
    return {model, epi};
  }
};

ClaimPredictor::ClaimPredictor(const ArmInfo& info, const LayerOperands& ops) : impl_(new Impl) {
  impl_->info = info;
  impl_->ops = ops;
}
ClaimPredictor::~ClaimPredictor() { delete impl_; }

std::string ClaimPredictor::claim(const RunRecord& record, int64_t batch_m, bool use_records,
                                  std::string& why_not) const {
  if (!impl_->info.fp8()) {
    const std::string name = impl_->int8_formula(record, use_records, why_not);
    if (name.empty()) return "";
    const Epilogue& e = epilogue(name);
    const EpilogueKind inst = formula::instance_kind(e.kind, batch_m, impl_->ops.n);
    if (inst != e.kind) return fmt::format("{} -> {} at M={} N={}", name, formula::kind_name(inst), batch_m, impl_->ops.n);
    return name;
  }
  const auto [model, epi] = impl_->fp8_claim(record, use_records, why_not);
  return model.empty() ? "" : model + "; " + epi;
}

std::string ClaimPredictor::stage_between(const RunRecord& a, const RunRecord& b, int64_t ma, int64_t mb,
                                          bool use_records) const {
  std::string why;
  if (!impl_->info.fp8()) {
    // The formula each instance evaluates: a shape-dispatching formula resolved at its batch's shape.
    const auto instance = [&](const RunRecord& r, int64_t m) -> std::string {
      const std::string name = impl_->int8_formula(r, use_records, why);
      if (name.empty()) return "";
      const Epilogue& e = epilogue(name);
      const EpilogueKind inst = formula::instance_kind(e.kind, m, impl_->ops.n);
      return inst == e.kind ? name : formula::kind_name(inst);
    };
    return instance(a, ma) == instance(b, mb) ? "" : "epilogue";
  }
  const auto ca = impl_->fp8_claim(a, use_records, why), cb = impl_->fp8_claim(b, use_records, why);
  const bool acc = ca.first != cb.first, epi = ca.second != cb.second;
  return acc && epi ? "accumulation and epilogue" : acc ? "accumulation" : epi ? "epilogue" : "";
}

bool ClaimPredictor::predict(const RunRecord& record, int64_t batch_m, std::span<const int64_t> rows,
                             bool use_records, std::vector<uint16_t>& out, std::string& why_not) {
  Impl& d = *impl_;
  const LayerOperands& ops = d.ops;
  const int64_t n = ops.n;
  out.assign(rows.size() * static_cast<size_t>(n), 0);
  if (!d.info.fp8()) {
    const std::string name = d.int8_formula(record, use_records, why_not);
    if (name.empty()) return false;
    const Epilogue& e = epilogue(name);
    std::call_once(d.acc_once, [&] { d.acc = exact_accumulate(ops.a_q.data(), ops.w_q.data(), {ops.m, ops.n, ops.k}); });
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t r = rows[i];
      for (int64_t c = 0; c < n; ++c) {
        const size_t at = static_cast<size_t>(r * n + c);
        const int64_t acc = d.acc.wide() ? d.acc.i64[at] : d.acc.i32[at];
        const std::optional<uint16_t> bias = ops.has_bias() ? std::optional<uint16_t>(ops.bias[c]) : std::nullopt;
        out[i * n + c] = e.apply(acc, ops.a_scale[r], ops.w_scale[c], bias, batch_m, n);
      }
    }
    return true;
  }
  const auto [model, epi] = d.fp8_claim(record, use_records, why_not);
  if (model.empty()) return false;
  QC_INPUT(!ops.has_bias(), "layer `{}`: C8 predicts FP8 layers without a bias only", ops.name);
  if (!d.codes) d.codes = std::make_unique<Fp8LayerCodes>(fp8_layer_codes(d.info.label, ops));
  auto it = d.models.find(model);
  if (it == d.models.end()) {
    std::vector<float> acc(static_cast<size_t>(ops.m * n));
    if (ops.block_scaled()) {
      // Every row's D from its own codes and scales: one evaluation of the layer serves every batch.
      const BlockModel bm = fp8_block_model(model);
      const Fp8BlockGemm g = fp8_block_gemm("C8 (the block model's prediction)", *d.codes, ops);
      validate_block_model_for(bm, g, fmt::format("C8: model {}: layer `{}`", model, ops.name));
      fp8_block_evaluate(bm, g, acc.data());
    } else {
      fp8_model_evaluate(fp8_accumulation_model(model).model, d.codes->gemm(), acc.data());
    }
    it = d.models.emplace(model, std::move(acc)).first;
  }
  if (ops.block_scaled()) {
    for (size_t i = 0; i < rows.size(); ++i) {
      for (int64_t c = 0; c < n; ++c) out[i * n + c] = formula::bf16_rn(it->second[rows[i] * n + c]);
    }
    return true;
  }
  // The epilogue sees the batch's shape (a shape-dispatching epilogue), so it runs on a batch-sized tile
  // whose first rows are the predicted ones.
  const Epilogue& e = epilogue(epi);
  const int64_t tile_m = std::max<int64_t>(batch_m, static_cast<int64_t>(rows.size()));
  std::vector<float> acc(static_cast<size_t>(tile_m * n), 0.0f), sa(static_cast<size_t>(tile_m), 1.0f);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(it->second.begin() + rows[i] * n, n, acc.begin() + static_cast<int64_t>(i) * n);
    sa[i] = ops.a_scale[rows[i]];
  }
  check_epilogue_inputs(e, sa.data(), ops.w_scale.data(), nullptr, tile_m, n, tile_m);
  apply_epilogue_rows_unchecked(e, acc.data(), tile_m, 0, static_cast<int64_t>(rows.size()), sa.data(),
                                ops.w_scale.data(), nullptr, n, out.data());
  return true;
}

LayerOperands batch_rows(const LayerOperands& ops, std::span<const int64_t> rows, uint64_t seed) {
  struct Holder {
    std::vector<int8_t> a;
    std::vector<float> sa;
    std::shared_ptr<const void> parent;
  };
  auto h = std::make_shared<Holder>();
  h->parent = ops.keepalive;
  const int64_t k = ops.k, sc = ops.a_scaling.scale_cols(k);
  const float max_scale = *std::max_element(ops.a_scale.begin(), ops.a_scale.end());
  h->a.resize(rows.size() * static_cast<size_t>(k));
  h->sa.resize(rows.size() * static_cast<size_t>(sc));
  uint64_t state = seed ^ 0x8f1bbcdcca62c1d6ull;
  for (size_t i = 0; i < rows.size(); ++i) {
    int8_t* dst = &h->a[i * k];
    float* dst_s = &h->sa[i * sc];
    if (rows[i] >= 0) {
      std::copy_n(&ops.a_q[rows[i] * k], k, dst);
      std::copy_n(&ops.a_scale[rows[i] * sc], sc, dst_s);
      continue;
    }
    // A synthetic mate: large codes (INT8 ±127; FP8 a layer row with its signs flipped, finite as
    // the row is) under a scale four times the layer's largest.
    const int64_t src = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(ops.m));
    for (int64_t j = 0; j < k; ++j) {
      dst[j] = ops.fp8() ? static_cast<int8_t>(static_cast<uint8_t>(ops.a_q[src * k + j]) ^ 0x80u)
                         : static_cast<int8_t>((splitmix64(state) & 1) ? 127 : -127);
    }
    std::fill_n(dst_s, sc, max_scale * 4.0f);
  }
  LayerOperands out = ops;
  out.m = static_cast<int64_t>(rows.size());
  out.a_q = h->a;
  out.a_scale = h->sa;
  out.checked_a = {};
  out.keepalive = h;
  return out;
}

std::string bits_text(uint16_t b) { return fmt::format("0x{:04x} ({:g})", b, bf16_to_f32(b)); }

}  // namespace qc::invariance_detail
