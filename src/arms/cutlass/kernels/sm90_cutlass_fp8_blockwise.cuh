// CUTLASS's sm90 blockwise-scaled FP8 GEMM (the kernel of CUTLASS example 67 and of vLLM's c3x
// `cutlass_gemm_blockwise_sm90_fp8`, csrc/quantization/w8a8/cutlass/c3x/scaled_mm_blockwise_sm90_fp8_dispatch.cuh):
// the collective builder's KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum mainloop
// (include/cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp), tile
// 128 x 128 x 128, cluster 1 x 2 x 1, scale granularity 1 x 128 (activations) and 128 x 128 (weights), with
// the identity epilogue tree (Sm90AccFetch cast to the output type, round to nearest). What it computes:
//   ScalePromotionInterval = ScaleGranularityK / 32 = 4 (line 128): every K tile of 128 is 4 wgmma k32
//   steps from a zeroed tensor-core accumulator (GMMA::ScaleOut::Zero, "Always zero out the accumulator
//   for finest granularity", lines 941, 1017), then `scale_if_needed(accumulation, tCrSFA)` (lines 905,
//   985, 1059), which for ScalePromotionInterval == 4 is GmmaFP8Accumulation::scale (line 734), i.e.
//   fp8_accumulation.hpp line 100 `accum_(i) += accum_temp_(i) * scale(i)`. The scale is the product
//   formed first, because the tile holds 128 scales of A and one of B (ScaleMsPerTile = 128 > 1,
//   ScaleNsPerTile = 1, lines 134-135): `filter_zeros(tCrSFA)(i) = filter_zeros(tCrSFA)(i) * scale_b`
//   (lines 883-889, 962, 1038). Compiled with nvcc's default --fmad=true (the engines' build),
//   `accum += temp * s` is one FFMA: D <- fma(rn32(sa*sb), C, D), the block model `block-deepgemm`
//   (docs/epilogues.md, "CUTLASS arms"). The main accumulator is not cleared before the first K tile
//   (partition_fragment_C, sm90_gemm_tma_warpspecialized_cooperative.hpp line 771): the model's D = +0
//   start differs from "no add" only in the sign of a zero result (tests/gpu/test_cuda_fp8_block.cpp
//   has an all -0 row to see it).
// Included only by the two instance files beside it (bf16 out, fp32 out), one translation unit each.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/util/packed_stride.hpp>

#include "sm90_cutlass_gemm.cuh"  // run_gemm
#include "sm90_cutlass_scaled_mm.cuh"

namespace qc::cutlass_kernels::detail {

template <class ElementOut>
struct BlockwiseGemm {
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_1, _2, _1>;
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::MN, cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
  static constexpr int kAlignOut = 16 / static_cast<int>(sizeof(ElementOut));
  // The accumulator stored as it is, rounded to the output type (vLLM's blockwise epilogue: no alpha/beta).
  using Identity = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::epilogue::thread::Identity, ElementOut, float, kRN>,
                                   fusion::Sm90AccFetch>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlignOut,
      ElementOut, cutlass::layout::RowMajor, kAlignOut, EpilogueSchedule, Identity>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::float_e4m3_t,
      cute::tuple<cutlass::layout::RowMajor, LayoutSFA>, 16, cutlass::float_e4m3_t,
      cute::tuple<cutlass::layout::ColumnMajor, LayoutSFB>, 16, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static LaunchResult launch(const BlockwiseArgs& a, ElementOut* out) {
    using StrideA = typename Gemm::GemmKernel::StrideA;
    using StrideB = typename Gemm::GemmKernel::StrideB;
    using StrideD = typename Gemm::GemmKernel::StrideD;
    const StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, make_shape(a.m, a.k, 1));
    const StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, make_shape(a.n, a.k, 1));
    const StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, make_shape(a.m, a.n, 1));
    const LayoutSFA layout_sfa = ScaleConfig::tile_atom_to_shape_SFA(make_shape(a.m, a.n, a.k, 1));
    const LayoutSFB layout_sfb = ScaleConfig::tile_atom_to_shape_SFB(make_shape(a.m, a.n, a.k, 1));
    typename Gemm::Arguments arguments{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {a.m, a.n, a.k, 1},
        {static_cast<const cutlass::float_e4m3_t*>(a.a), sa, static_cast<const cutlass::float_e4m3_t*>(a.w), sb, a.sa,
         layout_sfa, a.sw, layout_sfb},
        {{}, nullptr, sd, out, sd}};
    return run_gemm<Gemm>(arguments, a.stream);
  }
};

}  // namespace qc::cutlass_kernels::detail
