#include "qconform/operands.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <vector>

#include "core/name_table.hpp"
#include "core/parallel.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {

namespace {
// Every scale finite and > 0, and a power of two 2^e (e in [-127, 127], an exact UE8M0 value) when
// `layout.ue8m0`; a failure names the scale's coordinate in its array ([i], or [row, col] when the
// layout has several scales per row).
void check_scales(const LayerOperands& ops, std::span<const float> scales, const ScaleLayout& layout, const char* field) {
  const int64_t cols = layout.scale_cols(ops.k);
  const auto where = [&](size_t i) {
    return cols == 1 ? fmt::format("[{}]", i) : fmt::format("[{},{}]", static_cast<int64_t>(i) / cols, static_cast<int64_t>(i) % cols);
  };
  for (size_t i = 0; i < scales.size(); ++i) {
    const float s = scales[i];
    QC_INPUT(std::isfinite(s) && s > 0.0f, "{}: layer `{}`, field `{}`{}: expected a finite scale > 0, found {}",
             ops.source, ops.name, field, where(i), s);
    if (!layout.ue8m0) continue;
    const uint32_t bits = f32_bits(s);
    const uint32_t biased = bits >> 23;
    QC_INPUT((bits & 0x7FFFFFu) == 0 && biased >= 1 && biased <= 254,
             "{}: layer `{}`, field `{}`{}: expected a power of two 2^e with e in [-127, 127] (UE8M0 scales, "
             "--ue8m0 / scale_fmt ue8m0), found {} (0x{:08x})",
             ops.source, ops.name, field, where(i), s, bits);
  }
}

// The granularity an operand can take, and a block that is one.
void check_layout(const LayerOperands& ops, const ScaleLayout& l, bool weights, const char* field) {
  using G = ScaleGranularity;
  const bool fits = weights ? (l.granularity == G::per_tensor || l.granularity == G::per_channel || l.granularity == G::per_block)
                            : (l.granularity == G::per_tensor || l.granularity == G::per_token || l.granularity == G::per_token_group);
  QC_INPUT(fits, "{}: layer `{}`, field `{}`: expected {} scales, found {}", ops.source, ops.name, field,
           weights ? "per-tensor, per-channel or per-block" : "per-tensor, per-token or per-token-group",
           scale_granularity_name(l.granularity));
  const bool blocked = l.granularity == G::per_token_group || l.granularity == G::per_block;
  QC_INPUT(blocked == (l.block_k > 0) && l.block_k >= 0 && l.block_rows >= 1 &&
               (l.granularity == G::per_block || l.block_rows == 1),
           "{}: layer `{}`, field `{}`: {} scales with a block of {} rows x {} columns: expected {}", ops.source, ops.name,
           field, scale_granularity_name(l.granularity), l.block_rows, l.block_k,
           blocked ? "a block of at least one row and one column" : "no block (one scale covers whole rows)");
}
}  // namespace

constexpr NameRow<ScaleGranularity> kScaleGranularityNames[] = {
    {ScaleGranularity::per_tensor, "per-tensor"},   {ScaleGranularity::per_token, "per-token"},
    {ScaleGranularity::per_channel, "per-channel"}, {ScaleGranularity::per_token_group, "per-token-group"},
    {ScaleGranularity::per_block, "per-block"}};

std::string_view scale_granularity_name(ScaleGranularity g) { return name_of(kScaleGranularityNames, g); }

std::string ScaleLayout::spec() const {
  switch (granularity) {
    case ScaleGranularity::per_token_group: return fmt::format("per-token-group:{}", block_k);
    case ScaleGranularity::per_block: return fmt::format("per-block:{}x{}", block_rows, block_k);
    default: return std::string(scale_granularity_name(granularity));
  }
}

namespace {
// A block dimension of a scale spelling: a positive integer below 2^31.
int64_t parse_block_dim(std::string_view text, std::string_view spec, std::string_view what, std::string_view forms) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  QC_INPUT(ec == std::errc() && ptr == text.data() + text.size() && v >= 1 && v < (int64_t{1} << 31),
           "{} `{}`: expected {}, with positive block sizes, found `{}`", what, spec, forms, text);
  return v;
}
}  // namespace

ScaleLayout parse_scale_layout(std::string_view spec, bool weights, std::string_view what) {
  const std::string_view forms = weights ? "per-channel, per-tensor or per-block:<rows>x<cols> (e.g. per-block:128x128)"
                                         : "per-token, per-tensor or per-token-group:<g> (e.g. per-token-group:128)";
  if (spec == "per-tensor") return ScaleLayout::per_tensor();
  if (!weights && spec == "per-token") return ScaleLayout::per_token();
  if (weights && spec == "per-channel") return ScaleLayout::per_channel();
  constexpr std::string_view kGroup = "per-token-group:", kBlock = "per-block:";
  if (!weights && spec.starts_with(kGroup)) {
    return ScaleLayout::token_group(parse_block_dim(spec.substr(kGroup.size()), spec, what, forms));
  }
  if (weights && spec.starts_with(kBlock)) {
    const std::string_view dims = spec.substr(kBlock.size());
    const size_t x = dims.find('x');
    QC_INPUT(x != std::string_view::npos, "{} `{}`: expected {}, found no `x` between the block's rows and columns", what,
             spec, forms);
    return ScaleLayout::block(parse_block_dim(dims.substr(0, x), spec, what, forms),
                              parse_block_dim(dims.substr(x + 1), spec, what, forms));
  }
  QC_FAIL_INPUT("{} `{}`: expected {}", what, spec, forms);
}

std::string LayerOperands::scaling_description() const {
  const bool pow2 = a_scaling.ue8m0 && w_scaling.ue8m0;
  return fmt::format("{} x {}{}", a_scaling.spec(), w_scaling.spec(),
                     pow2 ? " (ue8m0)" : a_scaling.ue8m0 ? " (ue8m0 activation scales)" : w_scaling.ue8m0 ? " (ue8m0 weight scales)" : "");
}

namespace {
// The first non-finite code of `count` FP8 codes of `type`, -1 when all are finite: chunks of 4 MiB on
// every core for a large tensor (an operand file's codes are scanned once, when it is opened), merged in
// order; serially inside a parallel loop (opening a file checks its layers on every core already).
int64_t first_nonfinite(const uint8_t* bytes, int64_t count, ElementType type) {
  const auto scan = [type](const uint8_t* p, int64_t n) {
    return type == ElementType::e4m3 ? first_nonfinite_code<kE4M3>(p, n) : first_nonfinite_code<kE5M2>(p, n);
  };
  constexpr int64_t kChunk = int64_t{1} << 22;
  if (count <= 2 * kChunk || in_parallel_worker()) return scan(bytes, count);
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<int64_t> first(static_cast<size_t>(chunks), -1);
  parallel_for(chunks, 0, [&](int64_t c) {
    const int64_t at = c * kChunk, i = scan(bytes + at, std::min(kChunk, count - at));
    first[static_cast<size_t>(c)] = i < 0 ? -1 : at + i;
  });
  for (const int64_t i : first) {
    if (i >= 0) return i;
  }
  return -1;
}

void check_codes(const LayerOperands& ops, std::span<const int8_t> codes, ElementType type, int64_t cols,
                 const char* field) {
  if (type == ElementType::int8) return;
  const int64_t i = first_nonfinite(reinterpret_cast<const uint8_t*>(codes.data()), static_cast<int64_t>(codes.size()), type);
  if (i < 0) return;
  const auto c = static_cast<uint8_t>(codes[static_cast<size_t>(i)]);
  QC_FAIL_INPUT("{}: layer `{}`, field `{}`[{},{}]: expected a finite {} code, found 0x{:02x} ({}): FP8 operands must "
                "be finite (a quantizer saturates; see docs/formats.md)",
                ops.source, ops.name, field, i / cols, i % cols, element_type_name(type), c,
                type == ElementType::e4m3 || (c & 3) ? "NaN" : "infinity");
}
}  // namespace

constexpr NameRow<ElementType> kElementTypeNames[] = {
    {ElementType::int8, "int8"}, {ElementType::e4m3, "e4m3"}, {ElementType::e5m2, "e5m2"}};

std::string_view element_type_name(ElementType t) { return name_of(kElementTypeNames, t); }

void LayerOperands::validate() const {
  QC_INPUT(m > 0 && n > 0 && k > 0, "{}: layer `{}`: expected positive shape, found m={} n={} k={}", source, name, m,
           n, k);
  QC_INPUT(static_cast<int64_t>(a_q.size()) == m * k, "{}: layer `{}`, field `a_q`: expected {}x{} = {} elements, found {}",
           source, name, m, k, m * k, a_q.size());
  QC_INPUT(static_cast<int64_t>(w_q.size()) == n * k, "{}: layer `{}`, field `w_q`: expected {}x{} = {} elements, found {}",
           source, name, n, k, n * k, w_q.size());
  check_layout(*this, a_scaling, /*weights=*/false, "a_scale");
  check_layout(*this, w_scaling, /*weights=*/true, "w_scale");
  const auto shape = [this](const ScaleLayout& l, int64_t rows, const char* per_row) {
    return l.k_blocked() ? fmt::format("{}x{} (rows of {} by {}, ceil({}/{}) along K)", l.scale_rows(rows), l.scale_cols(k),
                                       per_row, l.spec(), k, l.block_k)
                         : fmt::format("{} (one per row of {})", rows, per_row);
  };
  QC_INPUT(static_cast<int64_t>(a_scale.size()) == a_scaling.scale_count(m, k),
           "{}: layer `{}`, field `a_scale`: expected {} = {} elements, found {}", source, name, shape(a_scaling, m, "a_q"),
           a_scaling.scale_count(m, k), a_scale.size());
  QC_INPUT(static_cast<int64_t>(w_scale.size()) == w_scaling.scale_count(n, k),
           "{}: layer `{}`, field `w_scale`: expected {} = {} elements, found {}", source, name,
           w_scaling.granularity == ScaleGranularity::per_block
               ? fmt::format("{}x{} (ceil({}/{}) blocks of w_q's rows by ceil({}/{}) along K)", w_scaling.scale_rows(n),
                             w_scaling.scale_cols(k), n, w_scaling.block_rows, k, w_scaling.block_k)
               : shape(w_scaling, n, "w_q"),
           w_scaling.scale_count(n, k), w_scale.size());
  QC_INPUT(bias.empty() || static_cast<int64_t>(bias.size()) == n,
           "{}: layer `{}`, field `bias`: expected {} elements, found {}", source, name, n, bias.size());
  check_scales(*this, a_scale, a_scaling, "a_scale");
  check_scales(*this, w_scale, w_scaling, "w_scale");
  QC_INPUT((a_type == ElementType::int8) == (w_type == ElementType::int8),
           "{}: layer `{}`: expected both operands INT8 or both FP8, found a_q {} and w_q {}", source, name,
           element_type_name(a_type), element_type_name(w_type));
  QC_INPUT(!block_scaled() || fp8(),
           "{}: layer `{}`: expected per-token/per-tensor x per-channel/per-tensor scales on an INT8 layer, found {} "
           "(block-scaled INT8 is not modelled; block scales are for FP8 layers)",
           source, name, scaling_description());
  QC_INPUT(!a_scaling.k_blocked() || !w_scaling.k_blocked() || a_scaling.block_k == w_scaling.block_k,
           "{}: layer `{}`: expected the activation groups and the weight blocks to cut K alike, found a_scale {} and "
           "w_scale {} (the accumulation promotes once per K block)",
           source, name, a_scaling.spec(), w_scaling.spec());
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
  ops.a_scaling = owner->a_scaling;
  ops.w_scaling = owner->w_scaling;
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
