// verify's element pass (element_pass.hpp): the hottest loop of verify on the host.
#include "checks/element_pass.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "checks/element_pass_kernels.hpp"
#include "core/parallel.hpp"
#include "core/numerics_checked.hpp"
#include "qconform/numerics.hpp"

namespace qc {

void ElementTally::merge(const ElementTally& o, size_t max_listed) {
  for (int s = 0; s < 2; ++s) {
    acc_mismatch[s] += o.acc_mismatch[s];
    formula_mismatch[s] += o.formula_mismatch[s];
  }
  safe_contradicted += o.safe_contradicted;
  predicted_diff += o.predicted_diff;
  predicted_vs_observed += o.predicted_vs_observed;
  pow2_excluded += o.pow2_excluded;
  pow2_violations += o.pow2_violations;
  for (const auto& f : o.acc_first) {
    if (acc_first.size() < 10) acc_first.push_back(f);
  }
  model_acc_diff += o.model_acc_diff;
  for (const auto& f : o.model_first) {
    if (model_first.size() < 10) model_first.push_back(f);
  }
  for (const auto& d : o.pow2_first) {
    if (pow2_first.size() < max_listed) pow2_first.push_back(d);
  }
}

namespace {

// Rows [r0, r1) of the declared formula `e` on the exact accumulators, into `y` (serial: the
// element pass runs blocks of rows on every core).
void emulate_rows(const Epilogue& e, const ElementContext& run, int64_t r0, int64_t r1, std::vector<uint16_t>& y) {
  const LayerOperands& ops = run.ops;
  y.resize(static_cast<size_t>((r1 - r0) * ops.n));
  apply_epilogue_rows(e, run.exact, ops.m, r0, r1 - r0, ops.a_scale.data(), ops.w_scale.data(),
                      ops.has_bias() ? ops.bias.data() : nullptr, ops.n, y.data(), 1);
}

// ---- The FP8 steps of one element: the reference, and the fast pass's listed elements and tails ----

// Element i of each exposed fp32 accumulator against the model its call claimed, bitwise.
void fp8_accumulator_element(const Fp8RunReference& f, const std::string& layer, int64_t i, int64_t row, int64_t col,
                             ElementTally& t) {
  for (int s = 0; s < 2; ++s) {
    if (f.arm_acc[s] == nullptr) continue;
    const float got = (*f.arm_acc[s])[i], want = (*f.acc_d[s])[i];
    if (f32_bits(got) == f32_bits(want)) continue;
    ++t.acc_mismatch[s];
    if (t.acc_first.size() < 10) {
      t.acc_first.push_back(fmt::format("{} {}[{},{}]: fp32 accumulator {} (0x{:08x}), model {} gives {} (0x{:08x})",
                                        s ? "B" : "A", layer, f.row_id(row), col, got, f32_bits(got), f.acc_model[s], want,
                                        f32_bits(want)));
    }
  }
}

// Element i's outputs: each modelled arm against its model + epilogue (`want[s]`); with both arms
// modelled, the predicted difference (the two `want`) against the observed one, the two models'
// accumulators, and under power-of-two scales an observed difference where those agree.
void fp8_output_element(const ElementContext& run, int64_t i, int64_t row, int64_t col, const uint16_t want[2],
                        ElementTally& t) {
  const Fp8RunReference& f = *run.fp8;
  const std::string& layer = run.ops.name;
  const uint16_t y[2] = {run.out[0]->y[i], run.out[1]->y[i]};
  for (int s = 0; s < 2; ++s) {
    if (!f.modelled[s] || y[s] == want[s]) continue;
    ++t.formula_mismatch[s];
    if (t.model_first.size() < 10) {
      const float dm = (*f.d[s])[i];
      const uint16_t got = y[s];
      t.model_first.push_back(fmt::format(
          "{} {}[{},{}]: output {} (0x{:04x}), model {} + epilogue gives {} (0x{:04x}); model accumulator {} "
          "(0x{:08x}){}",
          s ? "B" : "A", layer, run.row_id(row), col, bf16_to_f32(got), got, f.model[s], bf16_to_f32(want[s]), want[s], dm,
          f32_bits(dm),
          f.arm_acc[s] != nullptr
              ? fmt::format(", arm accumulator {} (0x{:08x})", (*f.arm_acc[s])[i], f32_bits((*f.arm_acc[s])[i]))
              : std::string(", arm accumulator not exposed")));
    }
  }
  if (!(f.modelled[0] && f.modelled[1])) return;
  const uint16_t x = y[0], z = y[1];
  const bool predicted = want[0] != want[1];
  t.predicted_diff += predicted;
  t.predicted_vs_observed += predicted != (x != z);
  const bool acc_differs = f32_bits((*f.differ_key(0))[i]) != f32_bits((*f.differ_key(1))[i]);
  t.model_acc_diff += acc_differs;
  if (run.mode == ScaleMode::real || x == z || acc_differs) return;
  // Power-of-two scales: a difference where the two models' accumulators agree came from neither model.
  ++t.pow2_violations;
  if (t.pow2_first.size() < run.compare.max_listed) {
    const bool finite = bf16_is_finite(x) && bf16_is_finite(z);
    t.pow2_first.push_back(DiffElement{layer, run.row_id(row), col, x, z, bf16_to_f32(x), bf16_to_f32(z),
                                       finite ? static_cast<int64_t>(bf16_ordered_distance(x, z)) : -1});
  }
}

// Rows [r0, r1) of an FP8 run, the reference: each arm against its model + epilogue (`model_y`, the
// whole tile; outputs and, when exposed, the fp32 accumulator, bitwise), the predicted set (model A +
// epilogue != model B + epilogue) against the observed one, and under power-of-two scales every
// observed difference where the models' accumulators differ. An arm whose model was refused on this
// run is compared with nothing.
void pass_fp8_rows_reference(const ElementContext& run, const std::vector<uint16_t> model_y[2], int64_t r0, int64_t r1,
                             ElementPass& part) {
  const Fp8RunReference& f = *run.fp8;
  const int64_t cols = run.ops.n;
  for (int64_t row = r0; row < r1; ++row) {
    for (int64_t col = 0; col < cols; ++col) {
      const int64_t i = row * cols + col;
      fp8_accumulator_element(f, run.ops.name, i, row, col, part.tally);
      const uint16_t want[2] = {f.modelled[0] ? model_y[0][i] : uint16_t{0}, f.modelled[1] ? model_y[1][i] : uint16_t{0}};
      fp8_output_element(run, i, row, col, want, part.tally);
    }
  }
}

// Where a scan stops (an element for a "first" list, or the last part of a vector), the reference
// steps take this many elements (at least one vector of every target) before the lanes go on.
constexpr int64_t kScalarRun = 64;

// Rows [r0, r1) of the exposed accumulators, fast: the lanes count, the reference steps list.
void fp8_accumulator_rows(const Fp8RunReference& f, const LayerOperands& ops, int64_t r0, int64_t r1, ElementTally& t) {
  if (f.arm_acc[0] == nullptr && f.arm_acc[1] == nullptr) return;
  const int64_t cols = ops.n, end = r1 * cols;
  for (int64_t at = r0 * cols; at < end;) {
    const float* got[2] = {nullptr, nullptr};
    const float* want[2] = {nullptr, nullptr};
    for (int s = 0; s < 2; ++s) {
      if (f.arm_acc[s] != nullptr) got[s] = f.arm_acc[s]->data() + at, want[s] = f.acc_d[s]->data() + at;
    }
    at += element_detail::scan_accumulators(got, want, end - at, /*list=*/t.acc_first.size() < 10, t.acc_mismatch);
    for (const int64_t stop = std::min(end, at + kScalarRun); at < stop; ++at) {
      fp8_accumulator_element(f, ops.name, at, at / cols, at % cols, t);
    }
  }
}

// Output elements per stretch of rows the fast pass applies the epilogues to at once: their model
// outputs, the arms' outputs and the models' accumulators stay in the core's cache.
constexpr int64_t kChunkElements = 16384;

// Rows [r0, r0 + rows) of arm s's model outputs into `out`: its declared epilogue over the model's fp32
// accumulators (checked once for the whole tile by the caller: `apply_epilogue_rows_unchecked`), or, on a
// block-scaled pair, bf16 = RNE(D) of the block model's D.
void model_outputs(const ElementContext& run, int s, int64_t r0, int64_t rows, uint16_t* out) {
  const Fp8RunReference& f = *run.fp8;
  const LayerOperands& ops = run.ops;
  if (f.block) {
    const float* d = f.d[s]->data() + r0 * ops.n;
    for (int64_t i = 0; i < rows * ops.n; ++i) out[i] = f32_to_bf16(d[i]);
    return;
  }
  apply_epilogue_rows_unchecked(*run.formula[s], f.d[s]->data(), ops.m, r0, rows, ops.a_scale.data(),
                                ops.w_scale.data(), nullptr, ops.n, out);
}

// Rows [r0, r1) of an FP8 run, fast: the same steps as `pass_fp8_rows_reference`, the models' outputs
// a few rows at a time (`apply_epilogue_rows_unchecked`: `element_pass` checked the whole tile), the
// counts in SIMD lanes (element_pass_kernels.cpp), the listed elements and the tails through the
// reference's steps.
void pass_fp8_rows_fast(const ElementContext& run, int64_t r0, int64_t r1, ElementPass& part) {
  const Fp8RunReference& f = *run.fp8;
  const LayerOperands& ops = run.ops;
  const int64_t cols = ops.n;
  ElementTally& t = part.tally;
  if (f.acc_tally == nullptr) fp8_accumulator_rows(f, ops, r0, r1, t);
  const bool both = f.modelled[0] && f.modelled[1];
  const bool pow2 = run.mode != ScaleMode::real;
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(cols, 1));
  std::vector<uint16_t> want[2];
  for (int s = 0; s < 2; ++s) {
    if (f.modelled[s]) want[s].resize(static_cast<size_t>(std::min(chunk_rows, r1 - r0) * cols));
  }
  element_detail::Fp8OutputCounts counts;
  for (int64_t c0 = r0; c0 < r1; c0 += chunk_rows) {
    const int64_t c1 = std::min(r1, c0 + chunk_rows);
    for (int s = 0; s < 2; ++s) {
      if (f.modelled[s]) model_outputs(run, s, c0, c1 - c0, want[s].data());
    }
    const int64_t base = c0 * cols, end = c1 * cols;
    for (int64_t at = base; at < end;) {
      element_detail::Fp8OutputScan scan;
      for (int s = 0; s < 2; ++s) {
        scan.want[s] = f.modelled[s] ? want[s].data() + (at - base) : nullptr;
        scan.got[s] = run.out[s]->y.data() + at;
        scan.d[s] = both ? f.differ_key(s)->data() + at : nullptr;
      }
      scan.pow2 = pow2;
      scan.list_models = t.model_first.size() < 10;
      scan.list_pow2 = pow2 && t.pow2_first.size() < run.compare.max_listed;
      at += element_detail::scan_fp8_outputs(scan, end - at, counts);
      for (const int64_t stop = std::min(end, at + kScalarRun); at < stop; ++at) {
        const size_t j = static_cast<size_t>(at - base);
        const uint16_t w[2] = {f.modelled[0] ? want[0][j] : uint16_t{0}, f.modelled[1] ? want[1][j] : uint16_t{0}};
        fp8_output_element(run, at, at / cols, at % cols, w, t);
      }
    }
  }
  for (int s = 0; s < 2; ++s) t.formula_mismatch[s] += counts.formula_mismatch[s];
  t.predicted_diff += counts.predicted_diff;
  t.predicted_vs_observed += counts.predicted_vs_observed;
  t.model_acc_diff += counts.model_acc_diff;
  t.pow2_violations += counts.pow2_violations;
}

enum class PassImpl { reference, fast };

// How many blocks of rows a pass over `ops` takes: one below 2^18 outputs, else four per thread.
int64_t row_blocks(const LayerOperands& ops, int threads) {
  return ops.m * ops.n < (int64_t{1} << 18) ? 1 : std::min<int64_t>(ops.m, 4 * resolve_threads(threads));
}

// Rows [r0, r1) of one run: the comparison of A with B, and the element checks.
// `model_y`: FP8 and the reference only, the models' outputs over the whole tile.
ElementPass pass_rows(const ElementContext& run, int64_t r0, int64_t r1, double near_zero, PassImpl impl,
                      const std::vector<uint16_t>* model_y) {
  const LayerOperands& ops = run.ops;
  const int64_t cols = ops.n;
  const size_t max_listed = run.compare.max_listed;
  ElementPass part;
  const auto compare = impl == PassImpl::fast ? compare_bf16_rows : compare_bf16_rows_reference;
  part.cmp = compare(run.out[0]->y, run.out[1]->y, r0, r1, cols, run.label, near_zero, max_listed);
  if (run.fp8 != nullptr) {
    if (impl == PassImpl::fast) {
      pass_fp8_rows_fast(run, r0, r1, part);
    } else {
      pass_fp8_rows_reference(run, model_y, r0, r1, part);
    }
    return part;
  }
  ElementTally& t = part.tally;
  std::vector<uint16_t> pred[2];  // the declared formulas over these rows
  for (int s = 0; s < 2; ++s) {
    if (run.formula[s]) emulate_rows(*run.formula[s], run, r0, r1, pred[s]);
  }
  // Raw pointers and register counters: this loop is verify's hottest on the host.
  const int32_t* acc[2] = {run.out[0]->acc ? run.out[0]->acc->data() : nullptr,
                           run.out[1]->acc ? run.out[1]->acc->data() : nullptr};
  const uint16_t* y[2] = {run.out[0]->y.data(), run.out[1]->y.data()};
  const uint16_t* p[2] = {run.formula[0] ? pred[0].data() : nullptr, run.formula[1] ? pred[1].data() : nullptr};
  const float* sa = ops.a_scale.data();
  const float* sw = ops.w_scale.data();
  const bool safe = run.safe;
  const ScaleMode mode = run.mode;
  int64_t acc_mismatch[2] = {0, 0}, formula_mismatch[2] = {0, 0}, safe_contradicted = 0, predicted_diff = 0;
  int64_t predicted_vs_observed = 0, pow2_excluded = 0, pow2_violations = 0;
  const auto pass = [&](const auto* exact_acc) {
    for (int64_t row = r0; row < r1; ++row) {
      for (int64_t col = 0; col < cols; ++col) {
        const int64_t i = row * cols + col, j = i - r0 * cols;  // j: index into this block's formulas
        const int64_t want = exact_acc[i];
        for (int s = 0; s < 2; ++s) {
          if (acc[s] != nullptr) {
            const int64_t got = acc[s][i];
            if (got != want) {
              ++acc_mismatch[s];
              if (t.acc_first.size() < 10) {
                t.acc_first.push_back(fmt::format("{} {}[{},{}]: acc {} (0x{:08x}), exact {}", s ? "B" : "A",
                                                  ops.name, run.row_id(row), col, got, static_cast<uint32_t>(got), want));
              }
            }
            safe_contradicted += safe && std::abs(got) > kFp32ExactIntLimit;
          }
          if (p[s] != nullptr) formula_mismatch[s] += p[s][j] != y[s][i];
        }
        const uint16_t x = y[0][i], z = y[1][i];
        if (p[0] != nullptr && p[1] != nullptr) {
          const bool predicted = p[0][j] != p[1][j];
          predicted_diff += predicted;
          predicted_vs_observed += predicted != (x != z);
        }
        if (mode == ScaleMode::real) continue;
        if (!pow2_in_jurisdiction(want, sa[row], sw[col])) {
          ++pow2_excluded;
        } else if (x != z) {
          ++pow2_violations;
          if (t.pow2_first.size() < max_listed) {
            const bool finite = bf16_is_finite(x) && bf16_is_finite(z);
            t.pow2_first.push_back(DiffElement{ops.name, run.row_id(row), col, x, z, bf16_to_f32(x), bf16_to_f32(z),
                                               finite ? static_cast<int64_t>(bf16_ordered_distance(x, z)) : -1});
          }
        }
      }
    }
  };
  if (run.exact.wide()) {
    pass(run.exact.i64.data());
  } else {
    pass(run.exact.i32.data());
  }
  for (int s = 0; s < 2; ++s) t.acc_mismatch[s] = acc_mismatch[s], t.formula_mismatch[s] = formula_mismatch[s];
  t.safe_contradicted = safe_contradicted, t.predicted_diff = predicted_diff;
  t.predicted_vs_observed = predicted_vs_observed, t.pow2_excluded = pow2_excluded;
  t.pow2_violations = pow2_violations;
  return part;
}

// Blocks of rows on every core, merged in row order.
ElementPass pass_blocks(const ElementContext& run, PassImpl impl, const std::vector<uint16_t>* model_y) {
  const int64_t rows = run.ops.m;
  const double near_zero = run.near_zero ? *run.near_zero : near_zero_limit(run.out[0]->y, run.compare);
  const int64_t blocks = row_blocks(run.ops, run.threads);
  const int64_t per = (rows + blocks - 1) / blocks;
  std::vector<ElementPass> parts(static_cast<size_t>(blocks));
  parallel_for(blocks, run.threads, [&](int64_t k) {
    parts[k] = pass_rows(run, std::min(rows, k * per), std::min(rows, (k + 1) * per), near_zero, impl, model_y);
  });
  ElementPass total = std::move(parts[0]);
  for (size_t k = 1; k < parts.size(); ++k) {
    total.cmp.merge(parts[k].cmp, run.compare.max_listed);
    total.tally.merge(parts[k].tally, run.compare.max_listed);
  }
  for (DiffElement& d : total.cmp.first) d.row = run.row_id(d.row);  // the comparison names the rows it saw
  return total;
}

}  // namespace

ElementPass element_pass(const ElementContext& run) {
  if (run.fp8 == nullptr) return pass_blocks(run, PassImpl::fast, nullptr);
  const Fp8RunReference& f = *run.fp8;
  // The checks `apply_epilogue` makes on the whole tile (the blocks apply the epilogues unchecked), A first.
  for (int s = 0; s < 2; ++s) {
    if (f.modelled[s] && !f.block) {
      check_epilogue_inputs(*run.formula[s], run.ops.a_scale.data(), run.ops.w_scale.data(), nullptr, run.ops.m,
                            run.ops.n, run.ops.m);
    }
  }
  ElementPass total = pass_blocks(run, PassImpl::fast, nullptr);
  if (f.acc_tally != nullptr) {
    for (int s = 0; s < 2; ++s) total.tally.acc_mismatch[s] = f.acc_tally->acc_mismatch[s];
    total.tally.acc_first = f.acc_tally->acc_first;
  }
  return total;
}

ElementPass element_pass_reference(const ElementContext& run) {
  if (run.fp8 == nullptr) return pass_blocks(run, PassImpl::reference, nullptr);
  // Each modelled arm's model through its declared epilogue, under this run's scales, over the whole tile.
  const Fp8RunReference& f = *run.fp8;
  std::vector<uint16_t> model_y[2];
  for (int s = 0; s < 2; ++s) {
    if (!f.modelled[s]) continue;
    model_y[s].resize(static_cast<size_t>(run.ops.m * run.ops.n));
    if (f.block) {
      for (size_t i = 0; i < model_y[s].size(); ++i) model_y[s][i] = f32_to_bf16((*f.d[s])[i]);  // RNE(D)
    } else {
      apply_epilogue(*run.formula[s], f.d[s]->data(), run.ops.a_scale.data(), run.ops.w_scale.data(), nullptr,
                     run.ops.m, run.ops.n, model_y[s].data(), run.threads);
    }
  }
  return pass_blocks(run, PassImpl::reference, model_y);
}

ElementTally fp8_accumulator_tally(const Fp8RunReference& f, const LayerOperands& ops, int threads) {
  const int64_t rows = ops.m;
  const int64_t blocks = row_blocks(ops, threads);
  const int64_t per = (rows + blocks - 1) / blocks;
  std::vector<ElementTally> parts(static_cast<size_t>(blocks));
  parallel_for(blocks, threads, [&](int64_t k) {
    fp8_accumulator_rows(f, ops, std::min(rows, k * per), std::min(rows, (k + 1) * per), parts[k]);
  });
  ElementTally total = std::move(parts[0]);
  for (size_t k = 1; k < parts.size(); ++k) total.merge(parts[k], /*max_listed=*/0);  // acc_first keeps its 10
  return total;
}

}  // namespace qc
