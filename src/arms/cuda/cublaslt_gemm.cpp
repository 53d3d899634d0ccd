// cuBLASLt plans (see cublaslt_gemm.hpp).
#include "arms/cuda/cublaslt_gemm.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "arms/cuda/cuda_common.hpp"

namespace qc::cuda {

cublasLtHandle_t cublaslt_handle() {
  static cublasLtHandle_t handle = [] {
    cublasLtHandle_t h = nullptr;
    QC_CUBLAS_CHECK(cublasLtCreate(&h));
    return h;
  }();
  return handle;
}

namespace {
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
}

namespace {
const char* fp8_name(bool e5m2) { return e5m2 ? "e5m2" : "e4m3"; }
}  // namespace

CublasLtGemm::CublasLtGemm(Kind kind, int m, int n, int k, bool fast_accum, bool a_e5m2, bool w_e5m2)
    : kind_(kind), m_(m), n_(n), k_(k), fast_accum_(fast_accum), a_e5m2_(a_e5m2), w_e5m2_(w_e5m2) {
  const bool fp8 = kind != Kind::int8_s32;
  QC_CHECK(fp8 || (!a_e5m2 && !w_e5m2), "CublasLtGemm: e5m2 operands with an INT8 plan");
  const auto fp8_type = [](bool e5m2) { return e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; };
  // cuBLASLt's A is our W, its B our A (see the header).
  const cudaDataType_t cublas_a_type = fp8 ? fp8_type(w_e5m2) : CUDA_R_8I;
  const cudaDataType_t cublas_b_type = fp8 ? fp8_type(a_e5m2) : CUDA_R_8I;
  const bool block = kind == Kind::fp8_bf16_block || kind == Kind::fp8_f32_block;
  const cudaDataType_t out_type = kind == Kind::int8_s32                                 ? CUDA_R_32I
                                  : kind == Kind::fp8_f32 || kind == Kind::fp8_f32_block ? CUDA_R_32F
                                                                                         : CUDA_R_16BF;
  QC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, fp8 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32I,
                                           fp8 ? CUDA_R_32F : CUDA_R_32I));
  const cublasOperation_t op_t = CUBLAS_OP_T;
  QC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t));
  if (fp8) {
    const int8_t fast = fast_accum ? 1 : 0;
    QC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
  }
  if (kind == Kind::fp8_bf16_vec) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    QC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
    QC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
  }
  if (block) {
    // A setting the library does not know is its refusal, reported like a missing algorithm.
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const cublasStatus_t sa = cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode);
    const cublasStatus_t sb = cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode);
    if (sa != CUBLAS_STATUS_SUCCESS || sb != CUBLAS_STATUS_SUCCESS) {
      error_ = fmt::format("cublasLtMatmulDescSetAttribute refused the block scale modes BLK128x128_32F / VEC128_32F "
                           "(status {} / {})",
                           static_cast<int>(sa), static_cast<int>(sb));
      return;
    }
  }
  // cuBLASLt's A is our W (K x N column-major, transposed), its B our A (K x M), its C/D our Yᵀ.
  QC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_layout_, cublas_a_type, k, n, k));
  QC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_layout_, cublas_b_type, k, m, k));
  QC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c_layout_, out_type, n, m, n));

  cublasLtMatmulPreference_t pref = nullptr;
  QC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  workspace_bytes_ = kWorkspaceBytes;
  QC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes_, sizeof workspace_bytes_));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle(), desc_, a_layout_, b_layout_, c_layout_,
                                                           c_layout_, pref, 1, &result, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || returned == 0) {
    error_ = fmt::format("cublasLtMatmulAlgoGetHeuristic found no algorithm (status {}, results {}) for {}{} M={} N={} K={}",
                         static_cast<int>(st), returned,
                         kind == Kind::int8_s32   ? "int8 s32"
                         : kind == Kind::fp8_f32  ? "fp8 f32"
                         : kind == Kind::fp8_bf16_vec ? "fp8 bf16 outer-vec"
                         : kind == Kind::fp8_bf16_block ? "fp8 bf16 block scales (A BLK128x128_32F, B VEC128_32F)"
                                                        : "fp8 f32 block scales (A BLK128x128_32F, B VEC128_32F)",
                         fp8 ? fmt::format(" ({} activations x {} weights)", fp8_name(a_e5m2), fp8_name(w_e5m2)) : "",
                         m, n, k);
    return;
  }
  algo_ = result.algo;
  workspace_bytes_ = result.workspaceSize;
  if (workspace_bytes_ > 0) QC_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  ok_ = true;
}

CublasLtGemm::~CublasLtGemm() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (c_layout_ != nullptr) cublasLtMatrixLayoutDestroy(c_layout_);
  if (b_layout_ != nullptr) cublasLtMatrixLayoutDestroy(b_layout_);
  if (a_layout_ != nullptr) cublasLtMatrixLayoutDestroy(a_layout_);
  if (desc_ != nullptr) cublasLtMatmulDescDestroy(desc_);
}

void CublasLtGemm::run(const void* a, const void* w, void* out, const float* sa, const float* sw,
                       cudaStream_t stream) {
  QC_CHECK(ok_, "cuBLASLt plan is not usable: {}", error_);
  if ((kind_ == Kind::fp8_bf16_vec || kind_ == Kind::fp8_bf16_block || kind_ == Kind::fp8_f32_block) &&
      (sa != bound_sa_ || sw != bound_sw_)) {
    // Our W is cuBLASLt's A (scale per row of op(A) = per output channel), our A its B.
    QC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof sw));
    QC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa));
    bound_sa_ = sa, bound_sw_ = sw;
  }
  if (kind_ == Kind::int8_s32) {
    const int32_t alpha = 1, beta = 0;
    QC_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), desc_, &alpha, w, a_layout_, a, b_layout_, &beta, out, c_layout_,
                                   out, c_layout_, &algo_, workspace_, workspace_bytes_, stream));
  } else {
    const float alpha = 1.0f, beta = 0.0f;
    QC_CUBLAS_CHECK(cublasLtMatmul(cublaslt_handle(), desc_, &alpha, w, a_layout_, a, b_layout_, &beta, out, c_layout_,
                                   out, c_layout_, &algo_, workspace_, workspace_bytes_, stream));
  }
}

int CublasLtGemm::block_scale_ld(int k) {
  const int blocks = (k + 127) / 128;
  const char* env = std::getenv("QC_CUBLASLT_BLOCK_SCALE_LD");
  if (env != nullptr && std::string_view(env) == "compact") return blocks;
  return (blocks + 3) / 4 * 4;
}

long long CublasLtGemm::config(int attribute) const {
  int32_t v = 0;  // every attribute read here is a 4-byte integer; the size must match exactly
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo_, static_cast<cublasLtMatmulAlgoConfigAttributes_t>(attribute), &v,
                                           sizeof v, &written) != CUBLAS_STATUS_SUCCESS)
    return -1;
  return static_cast<long long>(v);
}

std::string CublasLtGemm::algorithm() const {
  if (!ok_) return "none";
  return fmt::format("algo {} tile {} stages {} splitK {}", config(CUBLASLT_ALGO_CONFIG_ID),
                     config(CUBLASLT_ALGO_CONFIG_TILE_ID), config(CUBLASLT_ALGO_CONFIG_STAGES_ID), split_k());
}

long long CublasLtGemm::split_k() const { return ok_ ? config(CUBLASLT_ALGO_CONFIG_SPLITK_NUM) : -1; }
long long CublasLtGemm::reduction_scheme() const { return ok_ ? config(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) : -1; }

std::string CublasLtGemm::identity() const {
  if (!ok_) return "cublasLtMatmul: no algorithm (" + error_ + ")";
  // The INT8 and e4m3 x e4m3 identities are unchanged; a mixed pair names both operand types.
  const std::string types = !a_e5m2_ && !w_e5m2_
                                ? std::string("e4m3")
                                : fmt::format("{} (activations) x {} (weights)", fp8_name(a_e5m2_), fp8_name(w_e5m2_));
  const std::string what = kind_ == Kind::int8_s32 ? "int8 TN s32 (CUBLAS_COMPUTE_32I)"
                           : kind_ == Kind::fp8_f32
                               ? types + " TN f32 out (CUBLAS_COMPUTE_32F)"
                           : kind_ == Kind::fp8_bf16_vec
                               ? types + " TN bf16 out, A/B scale mode OUTER_VEC_32F (CUBLAS_COMPUTE_32F)"
                               : types + fmt::format(" TN {} out, scale modes A (weights) BLK128x128_32F (ld {}), B "
                                                     "(activations) VEC128_32F (CUBLAS_COMPUTE_32F)",
                                                     kind_ == Kind::fp8_f32_block ? "f32" : "bf16", block_scale_ld(k_));
  return fmt::format("cublasLtMatmul {}: heuristic algo id {} tile {} stages {} splitK {} reduction {} swizzle {} "
                     "fast_accum {} workspace {} B",
                     what, config(CUBLASLT_ALGO_CONFIG_ID), config(CUBLASLT_ALGO_CONFIG_TILE_ID),
                     config(CUBLASLT_ALGO_CONFIG_STAGES_ID), split_k(), reduction_scheme(),
                     config(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), fast_accum_ ? 1 : 0, workspace_bytes_);
}

}  // namespace qc::cuda
