// verify's element pass (element_pass.hpp): the hottest loop of verify on the host.
#include "checks/element_pass.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/parallel.hpp"
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

uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Rows [r0, r1) of an FP8 run: each arm against its model + epilogue (outputs and, when exposed, the
// fp32 accumulator, bitwise), the predicted set (model A + epilogue != model B + epilogue) against the
// observed one, and under power-of-two scales every observed difference where the models' accumulators
// differ. An arm whose model was refused on this run is compared with nothing.
void pass_fp8_rows(const ElementContext& run, int64_t r0, int64_t r1, ElementPass& part) {
  const Fp8RunReference& f = *run.fp8;
  const LayerOperands& ops = run.ops;
  const int64_t cols = ops.n;
  const size_t max_listed = run.compare.max_listed;
  ElementTally& t = part.tally;
  const uint16_t* y[2] = {run.out[0]->y.data(), run.out[1]->y.data()};
  const bool both = f.modelled[0] && f.modelled[1];
  for (int64_t row = r0; row < r1; ++row) {
    for (int64_t col = 0; col < cols; ++col) {
      const int64_t i = row * cols + col;
      for (int s = 0; s < 2; ++s) {
        const bool has_acc = f.arm_acc[s] != nullptr;
        if (has_acc && f32_bits((*f.arm_acc[s])[i]) != f32_bits((*f.acc_d[s])[i])) {
          ++t.acc_mismatch[s];
          if (t.acc_first.size() < 10) {
            const float got = (*f.arm_acc[s])[i], want = (*f.acc_d[s])[i];
            t.acc_first.push_back(fmt::format("{} {}[{},{}]: fp32 accumulator {} (0x{:08x}), model {} gives {} (0x{:08x})",
                                              s ? "B" : "A", ops.name, row, col, got, f32_bits(got), f.acc_model[s],
                                              want, f32_bits(want)));
          }
        }
        if (!f.modelled[s]) continue;
        const float dm = (*f.d[s])[i];
        const uint16_t want = f.y[s][i], got = y[s][i];
        if (got != want) {
          ++t.formula_mismatch[s];
          if (t.model_first.size() < 10) {
            t.model_first.push_back(fmt::format(
                "{} {}[{},{}]: output {} (0x{:04x}), model {} + epilogue gives {} (0x{:04x}); model accumulator {} "
                "(0x{:08x}){}",
                s ? "B" : "A", ops.name, row, col, bf16_to_f32(got), got, f.model[s], bf16_to_f32(want), want, dm,
                f32_bits(dm),
                has_acc ? fmt::format(", arm accumulator {} (0x{:08x})", (*f.arm_acc[s])[i], f32_bits((*f.arm_acc[s])[i]))
                        : std::string(", arm accumulator not exposed")));
          }
        }
      }
      if (!both) continue;
      const uint16_t x = y[0][i], z = y[1][i];
      const bool predicted = f.y[0][i] != f.y[1][i];
      t.predicted_diff += predicted;
      t.predicted_vs_observed += predicted != (x != z);
      const bool acc_differs = f32_bits((*f.d[0])[i]) != f32_bits((*f.d[1])[i]);
      t.model_acc_diff += acc_differs;
      if (run.mode == ScaleMode::real || x == z || acc_differs) continue;
      // Power-of-two scales: a difference where the two models' accumulators agree came from neither model.
      ++t.pow2_violations;
      if (t.pow2_first.size() < max_listed) {
        const bool finite = bf16_is_finite(x) && bf16_is_finite(z);
        t.pow2_first.push_back(DiffElement{ops.name, row, col, x, z, bf16_to_f32(x), bf16_to_f32(z),
                                           finite ? bf16_ulp_distance(x, z) : -1});
      }
    }
  }
}

// Rows [r0, r1) of one run: the comparison of A with B, and the element checks.
ElementPass pass_rows(const ElementContext& run, int64_t r0, int64_t r1, double near_zero) {
  const LayerOperands& ops = run.ops;
  const int64_t cols = ops.n;
  const size_t max_listed = run.compare.max_listed;
  ElementPass part;
  part.cmp = compare_bf16_rows(run.out[0]->y, run.out[1]->y, r0, r1, cols, run.label, near_zero, max_listed);
  if (run.fp8 != nullptr) {
    pass_fp8_rows(run, r0, r1, part);
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
                                                  ops.name, row, col, got, static_cast<uint32_t>(got), want));
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
            t.pow2_first.push_back(DiffElement{ops.name, row, col, x, z, bf16_to_f32(x), bf16_to_f32(z),
                                               finite ? bf16_ulp_distance(x, z) : -1});
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

}  // namespace

ElementPass element_pass(const ElementContext& run) {
  const int64_t rows = run.ops.m, cols = run.ops.n;
  const double near_zero = near_zero_limit(run.out[0]->y, run.compare);
  const int64_t blocks =
      rows * cols < (int64_t{1} << 18) ? 1 : std::min<int64_t>(rows, 4 * resolve_threads(run.threads));
  const int64_t per = (rows + blocks - 1) / blocks;
  std::vector<ElementPass> parts(static_cast<size_t>(blocks));
  parallel_for(blocks, run.threads, [&](int64_t k) {
    parts[k] = pass_rows(run, std::min(rows, k * per), std::min(rows, (k + 1) * per), near_zero);
  });
  ElementPass total = std::move(parts[0]);
  for (size_t k = 1; k < parts.size(); ++k) {
    total.cmp.merge(parts[k].cmp, run.compare.max_listed);
    total.tally.merge(parts[k].tally, run.compare.max_listed);
  }
  return total;
}

}  // namespace qc
