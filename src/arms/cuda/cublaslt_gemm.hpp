// cuBLASLt GEMM plans for the vendor arms: INT8 (s32 out) and FP8 (bf16 out with per-token /
// per-channel outer-vector scales, or fp32 out without scales). FP8 operands are e4m3 by default;
// either operand may be e5m2 (cuBLASLt on sm_90 takes e4m3 x e4m3, e5m2 x e4m3 and e4m3 x e5m2,
// not e5m2 x e5m2: the heuristic then finds no algorithm and `ok()` is false).
//
// Layout mapping: cuBLASLt is column-major, so the row-major product Y[M,N] = A[M,K]·W[N,K]ᵀ is
// computed as Yᵀ (N×M, column-major, ld N) = op(W)·A with W described as K×N column-major
// (transposed: "T") and A as K×M column-major ("N"): the "TN" layout IMMA and FP8 kernels need.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace qc::cuda {

class CublasLtGemm {
 public:
  enum class Kind {
    int8_s32,       // a, w int8; out int32 (alpha 1, beta 0, CUBLAS_COMPUTE_32I)
    fp8_bf16_vec,   // a, w FP8; out bf16; A/B scale mode OUTER_VEC_32F (sa per row, sw per column)
    fp8_f32,        // a, w FP8; out fp32, no scales
    // a, w FP8; out bf16; block scales: our W (cuBLASLt's A) BLK128x128_32F, one fp32 per 128x128 block,
    // [ceil(n/128)][ld] with ld = `block_scale_ld(k)`; our A (cuBLASLt's B) VEC128_32F, one fp32 per
    // row and 128 columns of K, stored row-fastest: sa[b * m + i] (CUDA 12.9+; Hopper only).
    fp8_bf16_block,
    fp8_f32_block,  // the same with fp32 out: D before the bf16 rounding (where cuBLASLt offers it)
  };
  // The leading dimension of the BLK128x128_32F weight scales for K columns: ceil(K/128) rounded up to
  // a multiple of 4 (the size cuBLASLt's samples allocate: roundoff(ceildiv(K, 128), 4) * ceildiv(N, 128)),
  // or, with QC_CUBLASLT_BLOCK_SCALE_LD=compact in the environment, ceil(K/128).
  static int block_scale_ld(int k);
  // Builds the plan and asks the heuristic for one algorithm. `ok()` false (with `error()`) when
  // cuBLASLt offers none for this combination (callers fall back or report). `a_e5m2` / `w_e5m2`:
  // our activations / weights are e5m2 codes (FP8 kinds only; e4m3 otherwise).
  CublasLtGemm(Kind kind, int m, int n, int k, bool fast_accum, bool a_e5m2 = false, bool w_e5m2 = false);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  // Device pointers. `sa` [m], `sw` [n] are read only by `fp8_bf16_vec`; `fp8_bf16_block` reads the
  // block scales described at its kind.
  void run(const void* a, const void* w, void* out, const float* sa, const float* sw, cudaStream_t stream);
  // "cublasLtMatmul int8 TN s32: algo 21 tile 20 stages 9 splitK 1 swizzle 0 fast_accum 0 workspace ..."
  std::string identity() const;
  // The chosen algorithm's CUBLASLT_ALGO_CONFIG_SPLITK_NUM and _REDUCTION_SCHEME (-1 without one).
  long long split_k() const;
  // "algo <id> tile <id> stages <id>": the chosen algorithm, to tell two plans' apart.
  std::string algorithm() const;
  long long reduction_scheme() const;

 private:
  long long config(int attribute) const;
  Kind kind_;
  int m_, n_, k_;
  bool fast_accum_;
  bool a_e5m2_, w_e5m2_;
  bool ok_ = false;
  std::string error_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_layout_ = nullptr, b_layout_ = nullptr, c_layout_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  const float* bound_sa_ = nullptr;
  const float* bound_sw_ = nullptr;
};

cublasLtHandle_t cublaslt_handle();

}  // namespace qc::cuda
