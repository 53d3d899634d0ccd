// The GPU block kernels' operands (block_fp8_operands.hpp).
#include "arms/block_fp8_operands.hpp"

#include <algorithm>
#include <climits>

#include "qconform/error.hpp"

namespace qc {

namespace {
int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
}  // namespace

BlockFp8Operands block_fp8_operands(const std::string& arm, const LayerOperands& ops, int64_t align_m,
                                    int64_t align_n, int64_t align_k, bool weights_k_major, int64_t sw_ld) {
  ops.validate();
  QC_INPUT(!ops.has_bias(), "arm {}: layer `{}`: the FP8 arms take no bias (not modelled)", arm, ops.name);
  BlockFp8Operands o;
  o.layer = fp8_layer_codes(arm, ops);
  const Fp8LayerCodes& codes = o.layer;
  QC_INPUT(codes.a_format == Fp8Format::e4m3 && codes.w_format == Fp8Format::e4m3,
           "arm {}: layer `{}`: expected e4m3 x e4m3 operands, found {}", arm, ops.name, codes.description);
  QC_INPUT(ops.block_scaled() && ops.scale_block_k() == 128 &&
               ops.w_scaling.granularity == ScaleGranularity::per_block && ops.w_scaling.block_rows == 128 &&
               (!ops.a_scaling.k_blocked() || ops.a_scaling.block_k == 128),
           "arm {}: layer `{}` ({}): expected weight scales per-block:128x128 and activation scales per-token-group:128 "
           "(or per-token / per-tensor), found {}",
           arm, ops.name, ops.source, ops.scaling_description());
  o.m = ops.m, o.n = ops.n, o.k = ops.k;
  o.mp = round_up(ops.m, align_m), o.np = round_up(ops.n, align_n), o.kp = round_up(ops.k, align_k);
  QC_INPUT(ops.m >= 1 && o.mp <= INT_MAX && o.np <= INT_MAX && o.kp <= INT_MAX,
           "arm {}: layer `{}`: expected M >= 1 and dimensions in int32 range (after padding), found M={} N={} K={}",
           arm, ops.name, ops.m, ops.n, ops.k);
  o.codes = codes.description;
  o.k_blocks = (ops.k + 127) / 128;
  o.n_blocks = (ops.n + 127) / 128;
  QC_CHECK(o.k_blocks == (o.kp + 127) / 128 && o.n_blocks == (o.np + 127) / 128,
           "block_fp8_operands: padding to {}x{}x{} changed the block counts", o.mp, o.np, o.kp);
  const auto pad = [&](std::span<const uint8_t> src, int64_t rows, int64_t rows_p, std::vector<uint8_t>& out) {
    if (rows_p == rows && o.kp == ops.k) return;  // uploaded as it is
    out.assign(static_cast<size_t>(rows_p * o.kp), 0);
    for (int64_t r = 0; r < rows; ++r) std::copy_n(src.data() + r * ops.k, ops.k, out.data() + r * o.kp);
  };
  pad(codes.a, ops.m, o.mp, o.a_padded);
  pad(codes.w, ops.n, o.np, o.w_padded);
  o.sa.assign(static_cast<size_t>(o.k_blocks * o.mp), 1.0f);
  for (int64_t i = 0; i < ops.m; ++i) {
    for (int64_t b = 0; b < o.k_blocks; ++b) {
      const int64_t kb = ops.a_scaling.k_blocked() ? b : 0;
      o.sa[static_cast<size_t>(b * o.mp + i)] = ops.a_scale[static_cast<size_t>(ops.a_scaling.index(i, kb, ops.k))];
    }
  }
  o.sw_ld = weights_k_major ? std::max(sw_ld, o.k_blocks) : 0;
  o.sw.assign(static_cast<size_t>(weights_k_major ? o.n_blocks * o.sw_ld : o.k_blocks * o.n_blocks), 1.0f);
  for (int64_t nb = 0; nb < o.n_blocks; ++nb) {
    for (int64_t b = 0; b < o.k_blocks; ++b) {
      const float s = ops.w_scale[static_cast<size_t>(nb * o.k_blocks + b)];
      o.sw[static_cast<size_t>(weights_k_major ? nb * o.sw_ld + b : b * o.n_blocks + nb)] = s;
    }
  }
  return o;
}

}  // namespace qc
