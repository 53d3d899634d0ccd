// The operands of a block-scaled FP8 layer as the GPU block kernels take them (cuda:cublaslt-fp8-block,
// cuda:cutlass-fp8-blockwise): codes zero-padded to the kernels' alignment, activation scales per row and
// K block (a per-token or per-tensor layer's scale repeated for every block), weight scales per 128-row
// block and K block, each in the order its kernel reads. Plain C++ (no CUDA), shared by both arms.
//
// Padding is exact: a zero code's products are zero and take no part in the tensor cores' sum (the
// Hopper model, docs/accumulation.md), a padded row or column is a separate output that is dropped, and
// rounding N or K up to a divisor or multiple of 128 (16, 128) never adds a 128-block, so every output of
// the layer sees the same K blocks and scales (checked).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "accum/fp8_model.hpp"
#include "qconform/operands.hpp"

namespace qc {

struct BlockFp8Operands {
  int64_t m = 0, n = 0, k = 0;     // the layer's
  int64_t mp = 0, np = 0, kp = 0;  // padded
  int64_t k_blocks = 0, n_blocks = 0;
  // [mp, kp], [np, kp] codes: the layer's own (`layer`, borrowed or re-encoded) where no padding is
  // needed, else zero-padded copies in `a_padded`, `w_padded` (a weight tensor is copied only when N or K
  // is not aligned: most layers upload their codes as they are).
  Fp8LayerCodes layer;
  std::vector<uint8_t> a_padded, w_padded;
  std::span<const uint8_t> a() const { return a_padded.empty() ? layer.a : std::span<const uint8_t>(a_padded); }
  std::span<const uint8_t> w() const { return w_padded.empty() ? layer.w : std::span<const uint8_t>(w_padded); }
  std::vector<float> sa;           // activation scales, row fastest: sa[b * mp + i] (padded rows 1)
  std::vector<float> sw;           // weight scales: k-major sw[nb * sw_ld + b], else sw[b * n_blocks + nb]
  int64_t sw_ld = 0;
  std::string codes;               // `Fp8LayerCodes::description`, for the run record
  // The layer's [m, n] from a kernel's [mp, np] bf16 output (or fp32 D); the vector itself when unpadded.
  template <typename T>
  std::vector<T> crop(std::vector<T> padded) const {
    if (mp == m && np == n) return padded;
    std::vector<T> out(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(i * n + j)] = padded[static_cast<size_t>(i * np + j)];
    }
    return out;
  }
};

// QC_INPUT naming `arm` and the layer unless it is a valid (`LayerOperands::validate`) block-scaled e4m3 x
// e4m3 layer without a bias, with K blocks of 128 and weight blocks of 128 x 128 (the only block the
// kernels are built for), whose padded dimensions fit in int32. `align_m`, `align_n`,
// `align_k`: the padding multiples; `weights_k_major`: the weight scales' order (cuBLASLt: k-major with
// leading dimension `sw_ld` >= k_blocks; CUTLASS's sm90 MN-major layout otherwise, sw_ld = 0).
BlockFp8Operands block_fp8_operands(const std::string& arm, const LayerOperands& ops, int64_t align_m, int64_t align_n, int64_t align_k, bool weights_k_major,
                                    int64_t sw_ld);

}  // namespace qc
