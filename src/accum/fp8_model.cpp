// FP8 accumulation models: the table, the printed formulas, validation, the scalar reference and
// the choice of fast evaluation (fp8_model.hpp). The model's arithmetic itself is
// `accum_model::evaluate` in include/qconform/accumulation.hpp (the reference, host and device);
// the fast kernels are src/accum/fp8_model_kernels.cpp.
#include "accum/fp8_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>

#include "accum/fp8_model_fp64.hpp"
#include "accum/fp8_model_kernels.hpp"
#include "core/name_table.hpp"
#include "core/parallel.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {

namespace {

constexpr Fp8AccumModel hopper(int32_t promote_steps) {
  Fp8AccumModel m;
  m.step_k = 32;
  m.term_bits = 13;
  m.term_rounding = AccumRounding::toward_zero;
  m.result_bits = 13;
  m.result_rounding = AccumRounding::toward_zero;
  m.alignment = AccumAlignment::exponent_sum;
  m.promote_steps = promote_steps;
  return m;
}

// An fp32 sum of exact products: k = 1, each add one round to nearest even.
constexpr Fp8AccumModel fp32_sum(int32_t promote_every, int32_t splits) {
  Fp8AccumModel m;
  m.step_k = 1;
  m.term_bits = -1;
  m.result_bits = 23;
  m.result_rounding = AccumRounding::nearest_even;
  m.promote_steps = promote_every;
  m.splits = splits;
  return m;
}

// `mma.sync.m16n8k32.f32.e4m3.e4m3` on sm_90, as ptxas lowers it (SASS: F2FP.F16.E4M3.UNPACK_B, then
// two HMMA.16816.F32 and an FADD): per instruction, a first HMMA from zero over the low f16 halves
// of the registers (k mod 4 in {0, 1}), a second from its result over the high ones, each a fused
// 16-product step with terms truncated 25 bits below E and the result truncated to fp32 (MMA-Sim's
// Hopper HMMA); the pair's C then added to the accumulator in fp32, round to nearest even.
constexpr Fp8AccumModel mma_sync_e4m3() {
  Fp8AccumModel m = hopper(/*promote_steps=*/2);  // truncating terms and results, e(a)+e(b), fp32 rn promotion
  m.step_k = 16;
  m.interleave = 2;
  m.term_bits = 25;
  m.result_bits = 23;
  return m;
}

constexpr Fp8AccumModel exact_model() {
  Fp8AccumModel m;
  m.step_k = 0;
  m.term_bits = -1;
  m.result_bits = 23;
  m.result_rounding = AccumRounding::nearest_even;
  return m;
}

int64_t parse_count(std::string_view text, std::string_view name) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  QC_INPUT(ec == std::errc() && ptr == text.data() + text.size() && v > 0 && v <= (int64_t{1} << 30),
           "accumulation model `{}`: expected a positive integer (at most 2^30) after the last '-', found `{}`", name,
           text);
  return v;
}

}  // namespace

const std::vector<NamedAccumModel>& fp8_accumulation_models() {
  static const std::vector<NamedAccumModel> rows{
      {"hopper-fp8-chain", hopper(0),
       "Hopper FP8 wgmma (k = 32, 13 fraction bits, truncation) in one chain over K: cuBLASLt with "
       "CUBLASLT_MATMUL_DESC_FAST_ACCUM (measured bit for bit on the H200, ../shared/reference/fp8-accumulation.md)"},
      {"hopper-fp8-promote4", hopper(4),
       "Hopper FP8 wgmma chains of 4 steps (128 products) from zero, each added to an fp32 accumulator (round to "
       "nearest even): cuBLASLt's default FP8 path (measured bit for bit on the H200)"},
      {"sm90-mma-sync-e4m3", mma_sync_e4m3(),
       "mma.sync.m16n8k32 e4m3 with fp32 accumulation on sm_90 (qconform's cuda:mma-fp8-block-* chain): per k32 "
       "instruction two HMMA.16816.F32 over the f16-unpacked halves (k mod 4 in {0,1}, then {2,3}), 25-bit "
       "truncated terms, truncated fp32 results, then an fp32 add into the accumulator (measured bit for bit on "
       "the H200, docs/accumulation.md \"mma.sync on e4m3\")"},
      {"exact", exact_model(), "the exact sum, rounded once to fp32 (round to nearest even)"},
      {"sequential", fp32_sum(0, 1), "sequential fp32 sum from +0: d = ((p0 + p1) + p2) + ..., each add rn32"},
  };
  return rows;
}

std::vector<std::string> fp8_accumulation_model_names() {
  std::vector<std::string> names;
  for (const NamedAccumModel& r : fp8_accumulation_models()) names.push_back(r.name);
  names.emplace_back("blocked-<chunk>");
  names.emplace_back("split-k-<splits>");
  names.emplace_back("hopper-fp8-chain-splitk-<splits>");
  names.emplace_back("hopper-fp8-promote4-splitk-<splits>");
  return names;
}

NamedAccumModel fp8_accumulation_model(std::string_view name) {
  for (const NamedAccumModel& r : fp8_accumulation_models()) {
    if (r.name == name) return r;
  }
  for (std::string_view base : {"hopper-fp8-chain", "hopper-fp8-promote4"}) {
    const std::string prefix = fmt::format("{}-splitk-", base);
    if (name.starts_with(prefix)) {
      NamedAccumModel r = fp8_accumulation_model(base);
      const int64_t s = parse_count(name.substr(prefix.size()), name);
      r.name = std::string(name);
      r.model.splits = static_cast<int32_t>(s);
      r.model.split_granule = kCublasLtSplitGranule;
      r.description = fmt::format(
          "{} over each of {} contiguous K ranges of ceil(K/({}*{}))*{} (the last shorter), the partials added in "
          "ascending order in fp32 (round to nearest even): cuBLASLt's split-K with reduction scheme COMPUTE_TYPE "
          "(measured with designed probes on the H200, docs/accumulation.md \"Split-K\")",
          base, s, kCublasLtSplitGranule, s, kCublasLtSplitGranule);
      return r;
    }
  }
  if (is_fp8_model_spelling(name)) {
    return {std::string(name), parse_fp8_model_spelling(name), "a model spelled out field by field (measured by qconform identify)"};
  }
  if (name.starts_with("blocked-")) {
    const int64_t c = parse_count(name.substr(8), name);
    return {std::string(name), fp32_sum(static_cast<int32_t>(c), 1),
            fmt::format("fp32 sums of {} products from +0, each added to an fp32 total (promotion every {})", c, c)};
  }
  if (name.starts_with("split-k-")) {
    const int64_t s = parse_count(name.substr(8), name);
    return {std::string(name), fp32_sum(0, static_cast<int32_t>(s)),
            fmt::format("K cut into {} ranges (the last takes the remainder), each an fp32 sum from +0, the "
                        "partials added in order in fp32",
                        s)};
  }
  std::string known;
  for (const std::string& n : fp8_accumulation_model_names()) known += (known.empty() ? "" : ", ") + n;
  QC_FAIL_INPUT("unknown accumulation model `{}`; expected one of: {}", name, known);
}

std::string accumulation_formula(const Fp8AccumModel& m) {
  std::string step;
  const std::string res = fmt::format("{}{}", rounding_tag(m.result_rounding), m.result_bits);
  const std::string k = m.step_k > 0 ? fmt::format("{}", m.step_k) : std::string("K");
  if (m.term_bits < 0) {
    step = m.step_k == 1 ? fmt::format("C <- {}(C + a_k*b_k)", res)
                         : fmt::format("C <- {}(C + sum_{{i<{}}} a_i*b_i) (exact terms)", res, k);
  } else {
    const std::string t = fmt::format("{}[E-{}]", rounding_tag(m.term_rounding), m.term_bits);
    step = fmt::format("C <- {}({}(C) + sum_{{i<{}}} {}(a_i*b_i)), E = max({}, e(C))", res, t, k, t,
                       m.alignment == AccumAlignment::exponent_sum ? "e(a_i)+e(b_i)" : "e(a_i*b_i)");
  }
  std::string chain = m.promote_steps > 0
                          ? fmt::format("; chains of {} step(s) from C = 0, D <- {}{}(D + C) after each; range = D",
                                        m.promote_steps, rounding_tag(m.promote_rounding), m.promote_bits)
                          : std::string("; one chain from C = 0; range = C");
  if (m.interleave > 0) {
    chain = fmt::format("; steps in pairs over {} positions, the first taking offsets o with floor(o/{}) even, "
                        "the second the rest",
                        2 * m.step_k, m.interleave) +
            chain;
  }
  const std::string ranges =
      m.split_granule > 0 ? fmt::format(" of ceil(K/({}*{}))*{}", m.split_granule, m.splits, m.split_granule) : "";
  const std::string split = m.splits > 1 ? fmt::format("; K in {} ranges{}, d = rn23 sum of the ranges in order",
                                                       m.splits, ranges)
                                         : std::string("; d = range (K ascending)");
  return step + chain + split;
}

void validate_accumulation_model(const Fp8AccumModel& m, std::string_view name) {
  QC_INPUT(m.result_bits >= 1 && m.result_bits <= 23,
           "accumulation model `{}`: result_bits: expected 1..23 (an fp32 accumulator), found {}", name, m.result_bits);
  QC_INPUT(m.promote_bits >= 1 && m.promote_bits <= 23,
           "accumulation model `{}`: promote_bits: expected 1..23 (an fp32 accumulator), found {}", name, m.promote_bits);
  QC_INPUT(m.term_bits >= -1 && m.term_bits <= 40,
           "accumulation model `{}`: term_bits: expected -1 (exact terms) or 0..40, found {}", name, m.term_bits);
  QC_INPUT(m.step_k >= 0, "accumulation model `{}`: step_k: expected >= 0 (0: the whole range), found {}", name,
           m.step_k);
  QC_INPUT(m.term_bits < 0 || (m.step_k >= 1 && m.step_k <= accum_model::kMaxStepChunk),
           "accumulation model `{}`: step_k: expected 1..{} with rounded terms (term_bits {}), found {}", name,
           accum_model::kMaxStepChunk, m.term_bits, m.step_k);
  QC_INPUT(m.promote_steps >= 0, "accumulation model `{}`: promote_steps: expected >= 0 (0: never), found {}", name,
           m.promote_steps);
  QC_INPUT(m.interleave >= 0 && (m.interleave == 0 || (m.step_k >= 1 && m.step_k <= accum_model::kMaxStepChunk &&
                                                       m.step_k % m.interleave == 0)),
           "accumulation model `{}`: interleave: expected 0, or a divisor of step_k (1..{}), found interleave={} "
           "step_k={}",
           name, accum_model::kMaxStepChunk, m.interleave, m.step_k);
  QC_INPUT(m.splits >= 1, "accumulation model `{}`: splits: expected >= 1, found {}", name, m.splits);
  QC_INPUT(m.split_granule >= 0, "accumulation model `{}`: split_granule: expected >= 0, found {}", name,
           m.split_granule);
}

void validate_fp8_codes(const Fp8Gemm& g) {
  QC_INPUT(g.s.m >= 0 && g.s.n >= 0 && g.s.k >= 0, "fp8 GEMM: expected non-negative shape, found M={} N={} K={}",
           g.s.m, g.s.n, g.s.k);
  QC_INPUT(g.s.k < (int64_t{1} << 40), "fp8 GEMM: expected K < 2^40, found {}", g.s.k);
  const struct {
    const uint8_t* p;
    Fp8Format f;
    int64_t rows;
    const char* field;
  } ops[] = {{g.a, g.a_format, g.s.m, "a"}, {g.w, g.w_format, g.s.n, "w"}};
  for (const auto& o : ops) {
    const int64_t i = accum_model::fp8_first_nonfinite(o.p, o.rows * g.s.k, o.f);
    if (i < 0) continue;
    QC_FAIL_INPUT("fp8 GEMM: {}[{},{}] = {:#04x} is {} encoding; expected a finite {} value (the accumulation models "
                  "take finite operands only, docs/accumulation.md)",
                  o.field, i / g.s.k, i % g.s.k, static_cast<unsigned>(o.p[i]),
                  o.f == Fp8Format::e5m2 && (o.p[i] & 3) == 0 ? "an infinity" : "a NaN",
                  o.f == Fp8Format::e4m3 ? "e4m3fn" : "e5m2");
  }
}

void validate_fp8_model_for(const Fp8AccumModel& m, AccumShape s) {
  validate_accumulation_model(m, "(unnamed)");
  QC_INPUT(m.splits == 1 || m.split_granule > 0 || m.splits <= s.k,
           "fp8 GEMM: split-k needs 1 <= splits <= K, found splits={} K={}", m.splits, s.k);
}

void validate_fp8_gemm(const Fp8AccumModel& m, const Fp8Gemm& g) {
  validate_fp8_model_for(m, g.s);
  validate_fp8_codes(g);
}

void fp8_model_reference(const Fp8AccumModel& m, const Fp8Gemm& g, float* d) {
  validate_fp8_gemm(m, g);
  for (int64_t i = 0; i < g.s.m; ++i) {
    for (int64_t j = 0; j < g.s.n; ++j) {
      d[i * g.s.n + j] =
          accum_model::evaluate(m, g.a + i * g.s.k, g.a_format, g.w + j * g.s.k, g.w_format, g.s.k);
    }
  }
}

Fp8AccumModel in_k_order(const Fp8AccumModel& m) {
  Fp8AccumModel flat = m;
  flat.interleave = 0;
  flat.splits = 1;
  flat.split_granule = 0;
  return flat;
}

int64_t gathered_steps_k(const Fp8AccumModel& m, int64_t len) {
  const int64_t pair = 2 * int64_t{m.step_k};
  return (len + pair - 1) / pair * pair;
}

namespace {

// The codes of rows [0, rows) over the K range [r0, r1) in the order an interleaved model's steps take
// them: per pair of steps, the first step's step_k positions, then the second's, a position past the
// range a zero code (no product: the step is the same with or without it).
std::vector<uint8_t> gather_steps(const Fp8AccumModel& m, const uint8_t* codes, int64_t rows, int64_t k, int64_t r0,
                                  int64_t r1) {
  const int64_t sk = m.step_k, pair = 2 * sk, k_out = gathered_steps_k(m, r1 - r0);
  std::vector<uint8_t> out(static_cast<size_t>(rows * k_out), uint8_t{0});
  for (int64_t q = 0; q < k_out; ++q) {
    const int64_t u = q % pair;
    const int64_t pos = r0 + q / pair * pair + accum_model::interleaved_offset(m.interleave, u / sk, u % sk);
    if (pos >= r1) continue;
    for (int64_t i = 0; i < rows; ++i) out[i * k_out + q] = codes[i * k + pos];
  }
  return out;
}

// An interleaved model, one K range at a time: each range is its steps in K order over the gathered
// codes (a fast path), the ranges' results added in order in fp32 as `accum_model::evaluate` does.
void evaluate_interleaved(const Fp8AccumModel& m, const Fp8Gemm& g, float* d, int threads) {
  const Fp8AccumModel flat = in_k_order(m);
  const int64_t outputs = g.s.m * g.s.n;
  std::fill(d, d + outputs, 0.0f);
  std::vector<float> part(static_cast<size_t>(outputs));
  for (int64_t r = 0; r < (m.splits < 1 ? 1 : m.splits); ++r) {
    int64_t r0 = 0, r1 = 0;
    accum_model::split_range(m, g.s.k, r, r0, r1);
    if (r0 == r1) continue;  // an empty range adds +0
    const std::vector<uint8_t> a = gather_steps(m, g.a, g.s.m, g.s.k, r0, r1);
    const std::vector<uint8_t> w = gather_steps(m, g.w, g.s.n, g.s.k, r0, r1);
    const AccumShape s{g.s.m, g.s.n, gathered_steps_k(m, r1 - r0)};
    fp8_model_evaluate(flat, {a.data(), g.a_format, w.data(), g.w_format, s}, part.data(), threads);
    for (int64_t i = 0; i < outputs; ++i) d[i] += part[i];  // one fp32 add, round to nearest even
  }
}

}  // namespace

Fp8FastPath fp8_fast_path(const Fp8AccumModel& m, const Fp8Gemm& g) {
  if (m.interleave > 0) return fp8_fast_path(in_k_order(m), g);  // what evaluate_interleaved runs
  // One decision for the CPU lanes and the GPU's per-output evaluation (accum/fp8_model_fp64.hpp).
  switch (accum_fp64::path_of(m, g.a_format, g.w_format, g.s.k)) {
    case accum_fp64::Path::steps: return Fp8FastPath::steps_f64;
    case accum_fp64::Path::fp32_sum: return Fp8FastPath::fp32_sum;
    case accum_fp64::Path::exact: return Fp8FastPath::exact_f64;
    case accum_fp64::Path::reference: return Fp8FastPath::reference;
  }
  return Fp8FastPath::reference;
}

constexpr NameRow<Fp8FastPath> kFastPathNames[] = {
    {Fp8FastPath::steps_f64, "steps in fp64 lanes"},
    {Fp8FastPath::fp32_sum, "fp32 sums in fp32 lanes"},
    {Fp8FastPath::exact_f64, "exact sum in fp64 lanes"},
    {Fp8FastPath::reference, "scalar reference (no fast path for this model)"}};

const char* fast_path_name(Fp8FastPath p) { return name_of(kFastPathNames, p).data(); }

void fp8_model_evaluate(const Fp8AccumModel& m, const Fp8Gemm& g, float* d, int threads) {
  validate_fp8_gemm(m, g);
  if (g.s.m == 0 || g.s.n == 0) return;
  const int64_t k = g.s.k;
  if (m.interleave > 0) return evaluate_interleaved(m, g, d, threads);
  switch (fp8_fast_path(m, g)) {
    case Fp8FastPath::steps_f64: fp8_kernels::step_panels(m, g, d, threads); return;
    case Fp8FastPath::fp32_sum: {
      std::vector<int64_t> b{0};
      if (m.splits > 1) {
        for (int64_t p = 1; p < m.splits; ++p) {
          int64_t r0 = 0, r1 = 0;
          accum_model::split_range(m, k, p, r0, r1);
          if (r0 > b.back()) b.push_back(r0);  // an empty range adds nothing
        }
      } else if (m.promote_steps > 0) {
        for (int64_t k0 = m.promote_steps; k0 < k; k0 += m.promote_steps) b.push_back(k0);
      }
      b.push_back(k);
      fp8_kernels::sum_panels(g, b, d, threads);
      return;
    }
    case Fp8FastPath::exact_f64: fp8_kernels::exact_e4m3(g, d, threads); return;
    case Fp8FastPath::reference:
      parallel_for(g.s.m, threads, [&](int64_t i) {
        for (int64_t j = 0; j < g.s.n; ++j) {
          d[i * g.s.n + j] = accum_model::evaluate(m, g.a + i * k, g.a_format, g.w + j * k, g.w_format, k);
        }
      });
      return;
  }
}

std::string fp8_model_target() { return fp8_kernels::target_name(); }

Fp8Format fp8_format(ElementType t) {
  QC_CHECK(t != ElementType::int8, "fp8_format of an INT8 operand");
  return t == ElementType::e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
}

Fp8LayerCodes fp8_layer_codes(const std::string& who, const LayerOperands& ops) {
  Fp8LayerCodes c;
  c.s = {ops.m, ops.n, ops.k};
  if (ops.fp8()) {
    c.a = ops.a_codes();
    c.w = ops.w_codes();
    c.a_format = fp8_format(ops.a_type);
    c.w_format = fp8_format(ops.w_type);
    c.description = fmt::format("{} x {} (FP8 layer)", element_type_name(ops.a_type), element_type_name(ops.w_type));
    return c;
  }
  // int8 code -> e4m3fn byte with the same value, or -1 when e4m3 cannot represent it exactly.
  static const std::array<int, 256> table = [] {
    std::array<int, 256> t{};
    for (int v = -128; v <= 127; ++v) {
      const uint8_t b = f32_to_e4m3fn(static_cast<float>(v), /*saturate=*/false);
      t[static_cast<uint8_t>(v)] = e4m3fn_to_f32(b) == static_cast<float>(v) ? b : -1;
    }
    return t;
  }();
  const auto encode = [&](std::span<const int8_t> codes, const char* field, std::vector<uint8_t>& out) {
    out.resize(codes.size());
    for (size_t i = 0; i < codes.size(); ++i) {
      const int b = table[static_cast<uint8_t>(codes[i])];
      QC_INPUT(b >= 0,
               "arm {}: layer `{}` ({}): {}[{},{}] = {} has no exact e4m3 encoding; the FP8 arms take an INT8 layer "
               "only when every code is an e4m3 value (|q| <= 16, even up to 32, multiples of 4 up to 64, of 8 up to "
               "120), so that both arms see the same operands (C3); give them an FP8 layer (`synth --element e4m3`, "
               "docs/formats.md) otherwise",
               who, ops.name, ops.source, field, static_cast<int64_t>(i) / ops.k, static_cast<int64_t>(i) % ops.k,
               static_cast<int>(codes[i]));
      out[i] = static_cast<uint8_t>(b);
    }
  };
  encode(ops.a_q, "a_q", c.a_store);
  encode(ops.w_q, "w_q", c.w_store);
  c.a = c.a_store;
  c.w = c.w_store;
  c.description = "int8 codes re-encoded to e4m3fn, exact (rejected otherwise)";
  return c;
}

std::string cublaslt_split_k_model(std::string_view model, long long split_k, long long reduction_scheme,
                                   std::string& refusal) {
  refusal.clear();
  if (split_k == 1 && reduction_scheme == 0) return std::string(model);
  constexpr long long kComputeType = 2;  // CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
  if (split_k > 1 && split_k <= (1 << 20) && reduction_scheme == kComputeType) {
    return fmt::format("{}-splitk-{}", model, split_k);
  }
  refusal = fmt::format(
      "no accumulation model claimed: cuBLASLt's heuristic chose split-K {} with reduction scheme {} for this shape; "
      "only one pass (split-K 1, scheme 0) and split-K with the partials reduced in fp32 (scheme 2, COMPUTE_TYPE) "
      "were measured on the H200 (docs/accumulation.md, \"Split-K\")",
      split_k, reduction_scheme);
  return {};
}

}  // namespace qc
