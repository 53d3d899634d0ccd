// Divergence versus reduction depth (sweep.hpp): operands per (K, seed), per-cell magnitude
// statistics, the fits, the JSON and the table. The arms of both formats come from the one arm
// registry; the FP8 ones (those that declare an accumulation model: cpu:fp8-<model>, the `fp8:`
// aliases, cuda:cublaslt-fp8[-fastacc]) are evaluated by src/accum/fp8_model*.cpp on the CPU.
//
// Build and test:
//   cmake --build build -j2 --target qconform_unit_tests &&
//   ./build/tests/qconform_unit_tests --gtest_filter='Sweep*'

#include <fmt/format.h>

#include <array>
#include <thread>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "core/version.hpp"
#include "qconform/arm.hpp"
#include "qconform/compare.hpp"
#include "arms/cuda/cuda.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "core/limits.hpp"
#include "qconform/numerics.hpp"
#include "core/parallel.hpp"
#include "accum/fp8_model.hpp"
#include "orchestrate/sweep.hpp"
#include "epilogue/block_models.hpp"
#include "checks/verify.hpp"
#include "synth/synth.hpp"
#include "core/results_json.hpp"

namespace qc {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

uint64_t fp8_stream(uint64_t seed, int64_t m, int64_t n, int64_t k, uint64_t which) {
  uint64_t st = seed * 0xD1B54A32D192ED03ull ^ (static_cast<uint64_t>(k) << 20) ^ (static_cast<uint64_t>(n) << 40) ^
                static_cast<uint64_t>(m) ^ (which << 60);
  splitmix64(st);
  return st;
}

// Irwin–Hall normal from one draw (four 16-bit uniforms), as `synth_operands` makes them.
double normal_from(uint64_t r) {
  const int64_t s = static_cast<int64_t>(r & 0xFFFF) + static_cast<int64_t>((r >> 16) & 0xFFFF) +
                    static_cast<int64_t>((r >> 32) & 0xFFFF) + static_cast<int64_t>(r >> 48);
  return (static_cast<double>(s) - 131070.0) / 37837.22668;
}

// Rows of `x` [rows, cols] scaled into e4m3 range: s = absmax/448 (fp32), q = e4m3(x / s).
void quantize_rows_e4m3(const std::vector<float>& x, int64_t rows, int64_t cols, std::vector<uint8_t>& q,
                        std::vector<float>& scale) {
  q.resize(x.size());
  scale.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float absmax = 0;
    for (int64_t c = 0; c < cols; ++c) absmax = std::max(absmax, std::fabs(x[static_cast<size_t>(r * cols + c)]));
    const float s = absmax > 0 ? absmax / 448.0f : 1.0f;
    scale[static_cast<size_t>(r)] = s;
    for (int64_t c = 0; c < cols; ++c) {
      q[static_cast<size_t>(r * cols + c)] = f32_to_e4m3fn(x[static_cast<size_t>(r * cols + c)] / s, /*saturate=*/true);
    }
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  const size_t h = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(h), v.end());
  const double hi = v[h];
  if (v.size() % 2) return hi;
  return (*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(h)) + hi) / 2;
}

double mean_finite(const std::vector<double>& v) {
  double s = 0;
  int n = 0;
  for (double x : v) {
    if (std::isfinite(x)) s += x, ++n;
  }
  return n ? s / n : kNaN;
}

nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json nums(const std::vector<double>& v) {
  nlohmann::json j = nlohmann::json::array();
  for (double x : v) j.push_back(num(x));
  return j;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// FP8 arms
// ------------------------------------------------------------------------------------------------

std::vector<uint16_t> fp8_epilogue_bf16(const float* d, const std::vector<float>& a_scale,
                                        const std::vector<float>& w_scale) {
  // The `fp8-scaled` row of the formula table (epilogue.hpp), the text the CUDA FP8 arms run too.
  std::vector<uint16_t> y(a_scale.size() * w_scale.size());
  apply_epilogue(fp8_epilogue(), d, a_scale.data(), w_scale.data(), nullptr, static_cast<int64_t>(a_scale.size()),
                 static_cast<int64_t>(w_scale.size()), y.data());
  return y;
}

Fp8Operands synth_fp8_operands(int64_t m, int64_t n, int64_t k, uint64_t seed) {
  QC_INPUT(m > 0 && n > 0 && k > 0, "synth_fp8_operands: expected positive M, N, K, found {}x{}x{}", m, n, k);
  Fp8Operands o;
  o.m = m, o.n = n, o.k = k;
  // Activations: N(0,1) per element times a channel gain; 0.5% of channels are outliers (gain 10),
  // as in LLM hidden states. Weights: N(0, 0.02²).
  std::vector<double> gain(static_cast<size_t>(k), 1.0);
  uint64_t st = fp8_stream(seed, m, n, k, 1);
  for (double& g : gain) {
    if (static_cast<double>(splitmix64(st) >> 11) * 0x1p-53 < 0.005) g = 10.0;
  }
  std::vector<float> x(static_cast<size_t>(m * k));
  st = fp8_stream(seed, m, n, k, 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(normal_from(splitmix64(st)) * gain[i % static_cast<size_t>(k)]);
  quantize_rows_e4m3(x, m, k, o.a, o.a_scale);
  std::vector<float> wv(static_cast<size_t>(n * k));
  st = fp8_stream(seed, m, n, k, 3);
  for (float& v : wv) v = static_cast<float>(normal_from(splitmix64(st)) * 0.02);
  quantize_rows_e4m3(wv, n, k, o.w, o.w_scale);
  return o;
}

LayerOperands synth_fp8_layer(const std::string& name, int64_t m, int64_t n, int64_t k, uint64_t seed,
                              std::string source) {
  Fp8Operands o = synth_fp8_operands(m, n, k, seed);
  OperandStorage s;
  s.a_q.assign(o.a.begin(), o.a.end());
  s.w_q.assign(o.w.begin(), o.w.end());
  s.a_scale = std::move(o.a_scale);
  s.w_scale = std::move(o.w_scale);
  s.a_type = s.w_type = ElementType::e4m3;
  return make_operands(name, m, n, k, std::move(s), std::move(source));
}

bool is_fp8_arm(std::string_view label) { return make_arm(label)->info().fp8(); }

// ------------------------------------------------------------------------------------------------
// Cells
// ------------------------------------------------------------------------------------------------

double SweepCell::share_ge2ulp() const {
  return measured ? static_cast<double>(ge2ulp) / static_cast<double>(measured) : kNaN;
}

SweepCell measure_cell(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int64_t rows, int64_t cols) {
  const Comparison c = compare_bf16(a, b, rows, cols);
  SweepCell cell;
  cell.total = c.total;
  cell.differing = c.bitwise_diff;
  cell.max_ulp = c.max_ulp;
  cell.max_rel = c.max_rel;
  cell.near_zero_diff = c.near_zero_diff;
  // The same near-zero limit as `compare_bf16`.
  const double limit = near_zero_limit(a, CompareOptions{});
  std::vector<double> rel;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (!bf16_is_finite(a[i]) || !bf16_is_finite(b[i])) {
      ++cell.nonfinite;
      continue;
    }
    const double av = bf16_to_f32(a[i]), bv = bf16_to_f32(b[i]);
    if (std::fabs(av) < limit) continue;
    ++cell.measured;
    rel.push_back(std::fabs(av - bv) / std::fabs(av));
    QC_DCHECK(bf16_is_finite(a[i]) && bf16_is_finite(b[i]), "sweep: ulp distance of a non-finite pair");
    if (bf16_ordered_distance(a[i], b[i]) >= 2) ++cell.ge2ulp;
  }
  cell.median_rel = median(std::move(rel));
  return cell;
}

// ------------------------------------------------------------------------------------------------
// The sweep
// ------------------------------------------------------------------------------------------------

SweepFormat sweep_pair_format(const std::string& arm_a, const std::string& arm_b) {
  const auto format_of = [](const std::string& label) {
    const ArmInfo i = make_arm(label)->info();
    return !i.fp8() ? SweepFormat::int8
                    : i.block() ? SweepFormat::fp8_block : SweepFormat::fp8;
  };
  const auto name = [](SweepFormat f) {
    return f == SweepFormat::int8 ? "INT8" : f == SweepFormat::fp8 ? "FP8" : "block-scaled FP8";
  };
  const SweepFormat fa = format_of(arm_a), fb = format_of(arm_b);
  QC_INPUT(fa == fb, "--arms: `{}` is {} but `{}` is {}; a sweep compares two arms of the same format", arm_a, name(fa),
           arm_b, name(fb));
  return fa;
}

namespace {

// The options, and the memory a sweep of them needs, before anything is allocated.
void check_sweep_options(const SweepOptions& o) {
  QC_INPUT(!o.ks.empty(), "sweep: --k: expected at least one depth");
  for (int64_t k : o.ks) QC_INPUT(k > 0, "sweep: --k: expected positive depths, found {}", k);
  QC_INPUT(o.m > 0 && o.n > 0, "sweep: expected --m > 0 and --n > 0, found {} and {}", o.m, o.n);
  QC_INPUT(o.seeds >= 1, "sweep: --seeds: expected >= 1, found {}", o.seeds);
  QC_INPUT(o.threads >= 0, "sweep: --threads: expected 0 (all cores) or a positive count, found {}", o.threads);
  {
    // Memory before allocating, per worker: int8 operands, their fp32 originals, both arms' outputs
    // and the exact accumulators of the deepest K.
    const int64_t k = *std::max_element(o.ks.begin(), o.ks.end());
    const double md = static_cast<double>(o.m), nd = static_cast<double>(o.n), kd = static_cast<double>(k);
    const unsigned workers =
        o.threads > 0 ? static_cast<unsigned>(o.threads) : std::max(1u, std::thread::hardware_concurrency());
    check_memory_estimate(std::min<double>(workers, o.seeds) * (5 * (md + nd) * kd + 16 * md * nd),
                          fmt::format("sweep --m {} --n {} --k {} ({} seeds)", o.m, o.n, k, o.seeds));
  }
}

// The two arms of a sweep, what they declare, and whether the declared models evaluate on the GPU.
struct SweepPair {
  Arm& a;
  Arm& b;
  ArmInfo info[2];
  bool gpu_models = false;
};

// One cell's outputs, records and explained count (-1 with `explained_note` saying why not computed).
struct CellRun {
  std::vector<uint16_t> ya, yb;
  nlohmann::json rec_a, rec_b;
  int64_t explained = -1;
  std::string explained_note;
};

// FP8: a declared model's outputs on the cell's operands (fp32 d, then the `fp8-scaled` epilogue).
std::vector<uint16_t> fp8_model_outputs(const SweepPair& p, const SweepOptions& o, const std::string& name,
                                        const Fp8Operands& ops) {
  const NamedAccumModel model = fp8_accumulation_model(name);
  std::vector<float> d;
  if (p.gpu_models) {
    d = fp8_model_evaluate_gpu(model.model, ops.a.data(), Fp8Format::e4m3, ops.w.data(), Fp8Format::e4m3,
                               {ops.m, ops.n, ops.k});
  } else {
    d.resize(static_cast<size_t>(ops.m * ops.n));
    fp8_model_evaluate(model.model, Fp8Gemm{ops.a.data(), Fp8Format::e4m3, ops.w.data(), Fp8Format::e4m3,
                                            {ops.m, ops.n, ops.k}},
                       d.data(), o.threads);
  }
  return fp8_epilogue_bf16(d.data(), ops.a_scale, ops.w_scale);
}

// The differing elements whose two values both predictions give.
int64_t count_explained(const std::vector<uint16_t>& ya, const std::vector<uint16_t>& yb,
                        const std::vector<uint16_t>& pa, const std::vector<uint16_t>& pb) {
  int64_t n = 0;
  for (size_t i = 0; i < ya.size(); ++i) n += ya[i] != yb[i] && ya[i] == pa[i] && yb[i] == pb[i];
  return n;
}

std::vector<uint16_t> run_fp8(Arm& arm, const Fp8Operands& ops, nlohmann::json& record, int threads) {
  const std::vector<float> d = arm.fp8_accumulate(ops.a.data(), ops.w.data(), ops.m, ops.n, ops.k, record, threads);
  record["epilogue"] = std::string(fp8_epilogue().formula);
  return fp8_epilogue_bf16(d.data(), ops.a_scale, ops.w_scale);
}

// A cell's one synthetic layer (M x N x K): INT8, or block-scaled e4m3 (per-token-group and per-block
// scales of the sweep's block).
std::vector<LayerOperands> cell_operands(const SweepOptions& o, int64_t k, uint64_t seed, bool block) {
  SynthOptions so;
  so.shapes = fmt::format("{}x{}x{}", o.m, o.n, k);
  so.m = o.m;
  so.seed = seed;
  so.threads = o.threads;
  if (block) {
    so.element = "e4m3";
    so.act_scale = fmt::format("per-token-group:{}", o.block);
    so.weight_scale = fmt::format("per-block:{}x{}", o.block, o.block);
  }
  std::vector<LayerOperands> layers = synth_operands(so);
  QC_CHECK(layers.size() == 1, "synth_operands({}) gave {} layers", so.shapes, layers.size());
  return layers;
}

// An INT8 cell: synthetic INT8 operands; explained by both declared formulas on the exact accumulators.
void run_int8_cell(const SweepPair& p, const SweepOptions& o, int64_t k, uint64_t seed, CellRun& c) {
  const std::vector<LayerOperands> layers = cell_operands(o, k, seed, false);
  ArmOutput oa = p.a.run(layers[0]);
  ArmOutput ob = p.b.run(layers[0]);
  c.ya = std::move(oa.y), c.yb = std::move(ob.y);
  c.rec_a = oa.record, c.rec_b = ob.record;
  if (c.explained_note.empty()) {  // both declared formulas on the exact accumulators
    const LayerOperands& ops = layers[0];
    const ExactAccumulators exact = exact_accumulate(ops.a_q.data(), ops.w_q.data(), {ops.m, ops.n, ops.k}, o.threads);
    std::vector<uint16_t> pred[2];
    for (int s2 = 0; s2 < 2; ++s2) {
      pred[s2].resize(c.ya.size());
      apply_epilogue_rows(epilogue(p.info[s2].epilogue), exact, ops.m, 0, ops.m, ops.a_scale.data(),
                          ops.w_scale.data(), ops.has_bias() ? ops.bias.data() : nullptr, ops.n, pred[s2].data(),
                          o.threads);
    }
    c.explained = count_explained(c.ya, c.yb, pred[0], pred[1]);
  }
}

// A block-scaled FP8 cell: explained by each run's claimed block model under the cell's scales, RNE(D).
void run_fp8_block_cell(const SweepPair& p, const SweepOptions& o, int64_t k, uint64_t seed, CellRun& c) {
  const std::vector<LayerOperands> layers = cell_operands(o, k, seed, true);
  const LayerOperands& ops = layers[0];
  ArmOutput oa = p.a.run(ops);
  ArmOutput ob = p.b.run(ops);
  c.ya = std::move(oa.y), c.yb = std::move(ob.y);
  c.rec_a = oa.record, c.rec_b = ob.record;
  if (c.explained_note.empty()) {  // each run's claimed block model under the cell's scales, RNE(D)
    const Fp8LayerCodes codes = fp8_layer_codes("sweep", ops);
    const Fp8BlockGemm g = fp8_block_gemm("sweep", codes, ops);
    std::vector<uint16_t> pred[2];
    for (int s2 = 0; s2 < 2; ++s2) {
      const nlohmann::json& rec = s2 ? c.rec_b : c.rec_a;
      const BlockModel model = fp8_block_model(claimed_model(rec.at("extra"), p.info[s2].accumulation_model));
      std::vector<float> d(c.ya.size());
      fp8_block_evaluate(model, g, d.data(), o.threads);
      pred[s2].resize(d.size());
      for (size_t i = 0; i < d.size(); ++i) pred[s2][i] = f32_to_bf16(d[i]);
    }
    c.explained = count_explained(c.ya, c.yb, pred[0], pred[1]);
  }
}

// An unscaled FP8 cell: the arms' unscaled GEMMs and the `fp8-scaled` epilogue; explained by each run's
// claimed model.
void run_fp8_cell(const SweepPair& p, const SweepOptions& o, int64_t k, uint64_t seed, CellRun& c) {
  const Fp8Operands ops = synth_fp8_operands(o.m, o.n, k, seed);
  c.ya = run_fp8(p.a, ops, c.rec_a, o.threads);
  c.yb = run_fp8(p.b, ops, c.rec_b, o.threads);
  for (const nlohmann::json* rec : {&c.rec_a, &c.rec_b}) {  // a run that refused its model explains nothing
    const std::string why = accumulation_model_refusal(rec->value("extra", nlohmann::json::object()));
    if (c.explained_note.empty() && !why.empty()) {
      c.explained_note = fmt::format("arm {} refused its model: {}", rec->value("arm", std::string("?")), why);
    }
  }
  if (c.explained_note.empty()) {
    // Each run's own claim: cuBLASLt's split-K runs claim the split-K form of the declared model.
    // (The CPU arms' records are flat, the others' RunRecords carry `extra`.)
    const auto claimed = [&](const nlohmann::json& rec, const ArmInfo& i) {
      return claimed_model(rec.contains("extra") ? rec["extra"] : rec, i.accumulation_model);
    };
    c.explained = count_explained(c.ya, c.yb, fp8_model_outputs(p, o, claimed(c.rec_a, p.info[0]), ops),
                                fp8_model_outputs(p, o, claimed(c.rec_b, p.info[1]), ops));
  }
}

// The rows (cells pooled over seeds), the fits of the depth curve and the overall rate.
void pool_rows(SweepResult& r, const SweepOptions& o) {
  stats::BinomialSeries pooled;
  std::vector<stats::BinomialSeries> per_seed(static_cast<size_t>(o.seeds));
  int64_t sx = 0, sn = 0;
  for (size_t i = 0; i < o.ks.size(); ++i) {
    SweepRow row;
    row.k = o.ks[i];
    std::vector<double> share, maxrel, medrel;
    int64_t ge2 = 0;
    for (int s = 0; s < o.seeds; ++s) {
      const SweepCell& c = r.cells[i * static_cast<size_t>(o.seeds) + static_cast<size_t>(s)];
      row.differing += c.differing;
      row.total += c.total;
      if (c.explained >= 0) row.explained += c.explained, row.explained_of += c.differing, ++row.explained_cells;
      ge2 += c.ge2ulp;
      share.push_back(c.share_ge2ulp());
      maxrel.push_back(c.measured ? c.max_rel : kNaN);
      medrel.push_back(c.median_rel);
      row.max_ulp = std::max(row.max_ulp, c.max_ulp);
      row.max_rel_max = std::max(row.max_rel_max, c.max_rel);
      auto& ps = per_seed[static_cast<size_t>(s)];
      ps.k.push_back(static_cast<double>(row.k));
      ps.count.push_back(c.differing);
      ps.total.push_back(c.total);
    }
    row.prevalence = static_cast<double>(row.differing) / static_cast<double>(row.total);
    row.ci = stats::clopper_pearson(row.differing, row.total, o.confidence);
    row.share_ge2ulp_mean = mean_finite(share);
    row.ge2ulp_of_all = static_cast<double>(ge2) / static_cast<double>(row.total);
    row.max_rel_mean = mean_finite(maxrel);
    row.median_rel_mean = mean_finite(medrel);
    pooled.k.push_back(static_cast<double>(row.k));
    pooled.count.push_back(row.differing);
    pooled.total.push_back(row.total);
    sx += row.differing;
    sn += row.total;
    r.rows.push_back(std::move(row));
  }
  r.fits = stats::fit_all(pooled, o.seeds >= 2 ? per_seed : std::vector<stats::BinomialSeries>{});
  r.chi_square = stats::chi_square_constant_rate(pooled);
  r.overall = stats::clopper_pearson(sx, sn, o.confidence);
}

}  // namespace

SweepResult run_sweep(const SweepOptions& o) {
  check_sweep_options(o);
  const auto t0 = std::chrono::steady_clock::now();
  SweepResult r;
  r.options = o;
  r.format = sweep_pair_format(o.arm_a, o.arm_b);

  // One registry for every arm family: FP8 arms are those that declare an accumulation model.
  std::unique_ptr<Arm> arm_a = make_arm(o.arm_a), arm_b = make_arm(o.arm_b);
  const ArmInfo info[2] = {arm_a->info(), arm_b->info()};
  std::string why_unexplained;  // "" when both arms declare a model (FP8) or a formula (INT8)
  for (const ArmInfo& i : info) {
    if (why_unexplained.empty() && (i.fp8() ? i.accumulation_model.empty() : i.epilogue.empty())) {
      why_unexplained = fmt::format("arm {} declares no {}", i.label, i.fp8() ? "accumulation model" : "formula");
    }
  }
  const SweepPair pair{*arm_a, *arm_b, {info[0], info[1]}, cuda_available(nullptr)};
  const size_t total_cells = o.ks.size() * static_cast<size_t>(o.seeds);
  for (int64_t k : o.ks) {
    for (int s = 0; s < o.seeds; ++s) {
      const uint64_t seed = o.first_seed + static_cast<uint64_t>(s);
      const auto c0 = std::chrono::steady_clock::now();
      CellRun run;
      run.explained_note = o.explained ? why_unexplained : "not computed (--no-explained)";
      if (r.format == SweepFormat::int8) {
        run_int8_cell(pair, o, k, seed, run);
      } else if (r.format == SweepFormat::fp8_block) {
        run_fp8_block_cell(pair, o, k, seed, run);
      } else {
        run_fp8_cell(pair, o, k, seed, run);
      }
      SweepCell cell = measure_cell(run.ya, run.yb, o.m, o.n);
      cell.explained = run.explained;
      cell.explained_note = run.explained_note;
      cell.k = k;
      cell.seed = seed;
      cell.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
      r.cells.push_back(cell);
      if (r.arms.empty()) r.arms = {{"a", run.rec_a}, {"b", run.rec_b}};
      if (o.progress) o.progress(r.cells.size(), total_cells, fmt::format("K={} seed={}", k, seed));
    }
  }

  pool_rows(r, o);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// ------------------------------------------------------------------------------------------------
// Output
// ------------------------------------------------------------------------------------------------

nlohmann::json to_json(const SweepResult& r) {
  const SweepOptions& o = r.options;
  nlohmann::json j = results_envelope("sweep");
  j["qconform_version"] = version();
  j["pair"] = {o.arm_a, o.arm_b};
  j["format"] = r.format == SweepFormat::int8 ? "int8" : r.format == SweepFormat::fp8 ? "fp8" : "fp8-block";
  j["arms"] = r.arms;
  j["m"] = o.m;
  j["n"] = o.n;
  j["seeds"] = nlohmann::json::array();
  for (int s = 0; s < o.seeds; ++s) j["seeds"].push_back(o.first_seed + static_cast<uint64_t>(s));
  j["confidence"] = o.confidence;
  j["seconds"] = r.seconds;
  j["rows"] = nlohmann::json::array();
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const SweepRow& w = r.rows[i];
    nlohmann::json per = nlohmann::json::array();
    for (int s = 0; s < o.seeds; ++s) {
      const SweepCell& c = r.cells[i * static_cast<size_t>(o.seeds) + static_cast<size_t>(s)];
      per.push_back({{"seed", c.seed},
                     {"count", c.differing},
                     {"total", c.total},
                     {"prevalence", c.prevalence()},
                     {"nonfinite", c.nonfinite},
                     {"near_zero_diff", c.near_zero_diff},
                     {"measured", c.measured},
                     {"ge2ulp", c.ge2ulp},
                     {"share_ge2ulp", num(c.share_ge2ulp())},
                     {"max_rel", num(c.measured ? c.max_rel : kNaN)},
                     {"median_rel", num(c.median_rel)},
                     {"max_ulp", c.max_ulp},
                     {"explained", c.explained < 0 ? nlohmann::json(nullptr) : nlohmann::json(c.explained)},
                     {"explained_note", c.explained_note},
                     {"seconds", c.seconds}});
    }
    j["rows"].push_back({{"k", w.k},
                         {"count", w.differing},
                         {"total", w.total},
                         {"prevalence", w.prevalence},
                         {"ci", {w.ci.lower, w.ci.upper}},
                         {"share_ge2ulp_mean", num(w.share_ge2ulp_mean)},
                         {"ge2ulp_of_all", w.ge2ulp_of_all},
                         {"max_rel_mean", num(w.max_rel_mean)},
                         {"max_rel_max", w.max_rel_max},
                         {"median_rel_mean", num(w.median_rel_mean)},
                         {"max_ulp", w.max_ulp},
                         {"explained", w.explained_cells ? nlohmann::json(w.explained) : nlohmann::json(nullptr)},
                         {"explained_share", w.explained_of ? nlohmann::json(static_cast<double>(w.explained) /
                                                                             static_cast<double>(w.explained_of))
                                                            : nlohmann::json(nullptr)},
                         {"per_seed", per}});
  }
  nlohmann::json models = nlohmann::json::object();
  for (const stats::ModelFit& m : r.fits.models) {
    models[stats::fit_model_name(m.model)] = {{"params", nums(m.params)},
                                             {"deviance", num(m.deviance)},
                                             {"heldout_deviance", num(m.heldout_deviance)},
                                             {"heldout_rows", nums(m.heldout_rows)},
                                             {"converged", m.converged},
                                             {"note", m.note}};
  }
  j["fits"] = {{"objective", "binomial deviance"}, {"models", models}, {"winner", r.fits.winner}};
  for (const auto& [name, jk] : {std::pair{"power_alpha_jackknife", &r.fits.power_alpha},
                                 std::pair{"saturation_alpha_jackknife", &r.fits.saturation_alpha}}) {
    if (*jk) j["fits"][name] = {{"leave_one_seed_out", nums((*jk)->leave_one_out)}, {"mean", num((*jk)->mean)}, {"se", num((*jk)->se)}};
  }
  j["chi_square_constant_rate"] = {{"statistic", r.chi_square.statistic},
                                   {"df", r.chi_square.df},
                                   {"p_value", r.chi_square.p_value},
                                   {"pooled_rate", r.chi_square.pooled_rate}};
  j["overall"] = {{"count", nullptr}, {"prevalence", r.overall.estimate}, {"ci", {r.overall.lower, r.overall.upper}}};
  int64_t sx = 0;
  for (const SweepRow& w : r.rows) sx += w.differing;
  j["overall"]["count"] = sx;
  return j;
}

std::string format_sweep(const SweepResult& r) {
  const bool ppm = r.format != SweepFormat::fp8;  // block-scaled forms move bf16 outputs rarely: ppm
  const double scale = ppm ? 1e6 : 100.0;
  const char* unit = ppm ? "ppm" : "%";
  std::string out = fmt::format("sweep {} vs {} ({}), M={} N={}, {} seed(s), {:.1f} s\n", r.options.arm_a,
                                r.options.arm_b, ppm ? "INT8" : r.format == SweepFormat::fp8 ? "FP8" : "block-scaled FP8", r.options.m, r.options.n, r.options.seeds,
                                r.seconds);
  out += fmt::format("{:>7} {:>9} {:>11} {:>23} {:>9} {:>10} {:>10} {:>10} {:>8} {:>10}\n", "K", "differ",
                     fmt::format("prev {}", unit), fmt::format("{:.0f}% CI ({})", r.options.confidence * 100, unit),
                     ">=2ulp", "max rel", "med rel", "maxrel/sd", "max ulp", "explained");
  for (const SweepRow& w : r.rows) {
    const std::string explained =
        w.explained_of ? fmt::format("{:.2f}%", 100.0 * static_cast<double>(w.explained) / static_cast<double>(w.explained_of))
                       : (w.explained_cells ? std::string("(none)") : std::string("-"));
    out += fmt::format("{:>7} {:>9} {:>11.4g} {:>23} {:>8.2f}% {:>10.3g} {:>10.3g} {:>10.3g} {:>8} {:>10}\n", w.k,
                       w.differing, w.prevalence * scale,
                       fmt::format("[{:.4g}, {:.4g}]", w.ci.lower * scale, w.ci.upper * scale),
                       std::isfinite(w.share_ge2ulp_mean) ? w.share_ge2ulp_mean * 100 : 0.0, w.max_rel_max,
                       w.median_rel_mean, w.max_rel_mean, w.max_ulp, explained);
  }
  out += "(>=2ulp: share of differing non-near-zero elements at >= 2 bf16 ulps, seed mean; max rel: over seeds; "
         "med rel: median relative difference among differing elements, seed mean; maxrel/sd: seed mean of max rel; "
         "explained: share of differing elements whose two values the arms' declared models predicted exactly)\n";
  if (!r.cells.empty() && r.cells.front().explained < 0) {
    out += fmt::format("explained: not computed: {}\n", r.cells.front().explained_note);
  }
  out += fmt::format("\nfits of prevalence vs K (binomial deviance; held-out: leave one K out)\n{:<11} {:>14} {:>14} {:>14} {:>14}  {}\n",
                     "model", "param 1", "param 2", "deviance", "held-out", "");
  for (const stats::ModelFit& m : r.fits.models) {
    out += fmt::format("{:<11} {:>14.6g} {:>14} {:>14.6g} {:>14.6g}  {}{}\n", stats::fit_model_name(m.model),
                       m.params.empty() ? kNaN : m.params[0],
                       m.params.size() > 1 ? fmt::format("{:.6g}", m.params[1]) : std::string("-"), m.deviance,
                       m.heldout_deviance, fit_model_name(m.model) == r.fits.winner ? "<- lowest held-out " : "",
                       m.note);
  }
  out += "(constant: p=c; linear: p=a+b*K; power: p=c*K^alpha; saturation: p=1-exp(-c*K^alpha))\n";
  for (const auto& [name, jk] : {std::pair{"power", &r.fits.power_alpha}, std::pair{"saturation", &r.fits.saturation_alpha}}) {
    if (*jk) out += fmt::format("alpha ({}), seed jackknife: mean {:.4f}, se {:.4f}\n", name, (*jk)->mean, (*jk)->se);
  }
  int64_t sx = 0, sn = 0;
  for (const SweepRow& w : r.rows) sx += w.differing, sn += w.total;
  out += fmt::format("chi-square (constant rate): X2 = {:.3f}, df = {}, p = {:.4g}; overall {} differing of {} = {:.4g} {} "
                     "[{:.4g}, {:.4g}]\n",
                     r.chi_square.statistic, r.chi_square.df, r.chi_square.p_value, sx, sn, r.overall.estimate * scale,
                     unit, r.overall.lower * scale, r.overall.upper * scale);
  return out;
}

}  // namespace qc

