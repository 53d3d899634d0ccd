#include "qconform/operands.hpp"

#include <cmath>

#include "qconform/accumulation.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {
void check_scales(const LayerOperands& ops, std::span<const float> scales, const char* field) {
  for (size_t i = 0; i < scales.size(); ++i) {
    const float s = scales[i];
    QC_INPUT(std::isfinite(s) && s > 0.0f, "{}: layer `{}`, field `{}`[{}]: expected a finite scale > 0, found {}",
             ops.source, ops.name, field, i, s);
  }
}
void check_codes(const LayerOperands& ops, std::span<const int8_t> codes, ElementType type, int64_t cols,
                 const char* field) {
  if (type == ElementType::int8) return;
  const Fp8Format f = type == ElementType::e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
  const int64_t i = accum_model::fp8_first_nonfinite(reinterpret_cast<const uint8_t*>(codes.data()),
                                                     static_cast<int64_t>(codes.size()), f);
  if (i < 0) return;
  const auto c = static_cast<uint8_t>(codes[static_cast<size_t>(i)]);
  QC_FAIL_INPUT("{}: layer `{}`, field `{}`[{},{}]: expected a finite {} code, found 0x{:02x} ({}): FP8 operands must "
                "be finite (a quantizer saturates; see docs/formats.md)",
                ops.source, ops.name, field, i / cols, i % cols, element_type_name(type), c,
                type == ElementType::e4m3 || (c & 3) ? "NaN" : "infinity");
}
}  // namespace

std::string_view element_type_name(ElementType t) {
  switch (t) {
    case ElementType::int8: return "int8";
    case ElementType::e4m3: return "e4m3";
    case ElementType::e5m2: return "e5m2";
  }
  return "?";
}

void LayerOperands::validate() const {
  QC_INPUT(m > 0 && n > 0 && k > 0, "{}: layer `{}`: expected positive shape, found m={} n={} k={}", source, name, m,
           n, k);
  QC_INPUT(static_cast<int64_t>(a_q.size()) == m * k, "{}: layer `{}`, field `a_q`: expected {}x{} = {} elements, found {}",
           source, name, m, k, m * k, a_q.size());
  QC_INPUT(static_cast<int64_t>(w_q.size()) == n * k, "{}: layer `{}`, field `w_q`: expected {}x{} = {} elements, found {}",
           source, name, n, k, n * k, w_q.size());
  QC_INPUT(static_cast<int64_t>(a_scale.size()) == m, "{}: layer `{}`, field `a_scale`: expected {} elements (one per row of a_q), found {}",
           source, name, m, a_scale.size());
  QC_INPUT(static_cast<int64_t>(w_scale.size()) == n, "{}: layer `{}`, field `w_scale`: expected {} elements (one per row of w_q), found {}",
           source, name, n, w_scale.size());
  QC_INPUT(bias.empty() || static_cast<int64_t>(bias.size()) == n,
           "{}: layer `{}`, field `bias`: expected {} elements, found {}", source, name, n, bias.size());
  check_scales(*this, a_scale, "a_scale");
  check_scales(*this, w_scale, "w_scale");
  QC_INPUT((a_type == ElementType::int8) == (w_type == ElementType::int8),
           "{}: layer `{}`: expected both operands INT8 or both FP8, found a_q {} and w_q {}", source, name,
           element_type_name(a_type), element_type_name(w_type));
  if (!checked_a.covers(a_q, a_type)) check_codes(*this, a_q, a_type, k, "a_q");
  if (!checked_w.covers(w_q, w_type)) check_codes(*this, w_q, w_type, k, "w_q");
}

LayerOperands make_operands(std::string name, int64_t m, int64_t n, int64_t k, OperandStorage storage,
                            std::string source) {
  auto owner = std::make_shared<OperandStorage>(std::move(storage));
  LayerOperands ops;
  ops.name = std::move(name);
  ops.m = m;
  ops.n = n;
  ops.k = k;
  ops.a_type = owner->a_type;
  ops.w_type = owner->w_type;
  ops.a_q = owner->a_q;
  ops.a_scale = owner->a_scale;
  ops.w_q = owner->w_q;
  ops.w_scale = owner->w_scale;
  ops.bias = owner->bias;
  ops.source = std::move(source);
  ops.keepalive = owner;
  return ops;
}

LayerOperands with_scales(const LayerOperands& ops, std::vector<float> a_scale, std::vector<float> w_scale) {
  struct Holder {
    std::shared_ptr<const void> parent;
    std::vector<float> a_scale, w_scale;
  };
  auto holder = std::make_shared<Holder>(Holder{ops.keepalive, std::move(a_scale), std::move(w_scale)});
  LayerOperands out = ops;
  out.a_scale = holder->a_scale;
  out.w_scale = holder->w_scale;
  out.keepalive = holder;
  return out;
}

}  // namespace qc
