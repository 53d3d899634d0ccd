// The CUTLASS 3.x kernels of the CUTLASS arms, built from CUTLASS's own collective builders
// (sm90, TMA warp-specialized mainloops, epilogue visitor trees). Included only by the instance
// files (one kernel configuration each, so they compile in parallel), which cmake/cutlass.cmake
// generates from the templates beside it (*.cu.in), and by sm90_cutlass_dispatch.cu.
//
// Two families, each written after the engine's published source (docs/epilogues.md, "CUTLASS
// arms", names the files and what they compute):
//   - INT8: vLLM's `cutlass_3x_gemm` (csrc/quantization/w8a8/cutlass/c3x/scaled_mm.cuh) with the
//     epilogue trees of `ScaledEpilogue` / `ScaledEpilogueBias`
//     (csrc/cutlass_extensions/epilogue/scaled_mm_epilogues_c3x.hpp):
//       Compute1(ScaleA, Compute0(ScaleB, Accum)) = bf16(sa * rn32(sw * f32(acc))),
//       with a bias Compute1 = multiply_add: bf16(sa * t + f32(bias)), which nvcc contracts into one
//       FFMA under its default --fmad=true (vLLM's build; these files are compiled that way too,
//       CMakeLists.txt, `qconform_cutlass_kernels`).
//   - FP8 rowwise: PyTorch's `f8f8bf16_rowwise_impl` (aten/src/ATen/native/cuda/RowwiseScaledMM.cu):
//       Cast<bf16>(Add(Bias, Multiply(WScale, Multiply(XScale, Accum)))), where Bias is a row (or,
//       transposed, column) broadcast whose null pointer broadcasts 0: the add happens without a
//       bias too, and turns a -0 into +0.
// The layouts are the entry header's (sm90_cutlass_scaled_mm.cuh).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_compute_tma_warpspecialized.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_load_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/util/packed_stride.hpp>

#include "sm90_cutlass_scaled_mm.cuh"

namespace qc::cutlass_kernels::detail {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRN = cutlass::FloatRoundStyle::round_to_nearest;

// Runs `Gemm` (a GemmUniversalAdapter) on `arguments` on `stream`; the workspace, if any, is
// stream-ordered memory freed after the launch.
template <class Gemm>
LaunchResult run_gemm(typename Gemm::Arguments& arguments, cudaStream_t stream) {
  LaunchResult r;
  r.stages = Gemm::GemmKernel::DispatchPolicy::Stages;
  Gemm gemm;
  cutlass::Status status = gemm.can_implement(arguments);
  if (status != cutlass::Status::kSuccess) {
    r.error = cutlass::cutlassGetStatusString(status);
    return r;
  }
  r.workspace_bytes = Gemm::get_workspace_size(arguments);
  void* workspace = nullptr;
  if (r.workspace_bytes > 0 && cudaMallocAsync(&workspace, r.workspace_bytes, stream) != cudaSuccess) {
    r.error = "cudaMallocAsync of the CUTLASS workspace failed";
    return r;
  }
  status = gemm.initialize(arguments, workspace, stream);
  if (status == cutlass::Status::kSuccess) status = gemm.run(stream);
  if (workspace != nullptr) cudaFreeAsync(workspace, stream);
  if (status != cutlass::Status::kSuccess) r.error = cutlass::cutlassGetStatusString(status);
  return r;
}

// ---- INT8: vLLM's cutlass_3x_gemm with ScaledEpilogue / ScaledEpilogueBias ------------------------

template <class TileShape>
struct VllmScaledEpilogue {
  using Accum = fusion::Sm90AccFetch;
  using ScaleA = fusion::Sm90ColBroadcast<0, TileShape, float, float, Stride<_1, _0, _0>>;  // sa[m]
  using ScaleB = fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, _0>>;  // sw[n]
  using Bias = fusion::Sm90RowBroadcast<0, TileShape, cutlass::bfloat16_t, cutlass::bfloat16_t, Stride<_0, _1, _0>,
                                        8, /*EnableNullptr=*/false>;
  using Compute0 = fusion::Sm90Compute<cutlass::multiplies, float, float, kRN>;
  using EVTCompute0 = fusion::Sm90EVT<Compute0, ScaleB, Accum>;
  using Compute1 = fusion::Sm90Compute<cutlass::multiplies, cutlass::bfloat16_t, float, kRN>;
  using Compute1Bias = fusion::Sm90Compute<cutlass::multiply_add, cutlass::bfloat16_t, float, kRN>;
  using NoBias = fusion::Sm90EVT<Compute1, ScaleA, EVTCompute0>;
  using WithBias = fusion::Sm90EVT<Compute1Bias, ScaleA, EVTCompute0, Bias>;

  static typename NoBias::Arguments args(const ScaledMmArgs& a, NoBias*) {
    return {{a.sa}, {{a.sw}, {}, {}}, {}};
  }
  static typename WithBias::Arguments args(const ScaledMmArgs& a, WithBias*) {
    return {{a.sa}, {{a.sw}, {}, {}}, {reinterpret_cast<const cutlass::bfloat16_t*>(a.bias)}, {}};
  }
};

template <class TileShape, class ClusterShape, class KernelSchedule, class EpilogueSchedule, bool kBias>
struct VllmInt8Gemm {
  using Epi = VllmScaledEpilogue<TileShape>;
  using EVT = std::conditional_t<kBias, typename Epi::WithBias, typename Epi::NoBias>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, int32_t, float, void, cutlass::layout::RowMajor, 8,
      cutlass::bfloat16_t, cutlass::layout::RowMajor, 8, EpilogueSchedule, EVT>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, cutlass::layout::RowMajor, 16, int8_t,
      cutlass::layout::ColumnMajor, 16, int32_t, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static LaunchResult launch(const ScaledMmArgs& a) {
    using StrideA = typename Gemm::GemmKernel::StrideA;
    using StrideB = typename Gemm::GemmKernel::StrideB;
    using StrideD = typename Gemm::GemmKernel::StrideD;
    const StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, make_shape(a.m, a.k, 1));
    const StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, make_shape(a.n, a.k, 1));
    const StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, make_shape(a.m, a.n, 1));
    typename Gemm::Arguments arguments{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {a.m, a.n, a.k, 1},
        {static_cast<const int8_t*>(a.a), sa, static_cast<const int8_t*>(a.w), sb},
        {Epi::args(a, static_cast<EVT*>(nullptr)), nullptr, sd, reinterpret_cast<cutlass::bfloat16_t*>(a.y), sd}};
    return run_gemm<Gemm>(arguments, a.stream);
  }
};

// One vLLM configuration (cutlass_dispatch.hpp, `kInt8ConfigTable`), without and with a bias.
template <class TileShape, class ClusterShape, class KernelSchedule>
LaunchResult launch_int8_vllm(const ScaledMmArgs& a, bool bias) {
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
  if (bias) return VllmInt8Gemm<TileShape, ClusterShape, KernelSchedule, EpilogueSchedule, true>::launch(a);
  return VllmInt8Gemm<TileShape, ClusterShape, KernelSchedule, EpilogueSchedule, false>::launch(a);
}

// ---- FP8 rowwise: PyTorch's f8f8bf16_rowwise_impl -------------------------------------------------

template <bool kTile128, bool kFast>
struct RowwiseSchedule;
template <>
struct RowwiseSchedule<false, false> {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecialized;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};
template <>
struct RowwiseSchedule<true, false> {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
template <>
struct RowwiseSchedule<false, true> {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedFP8FastAccum;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};
template <>
struct RowwiseSchedule<true, true> {
  using Kernel = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};

template <class TileShape, class ClusterShape, bool kTransposed, bool kFast>
struct TorchRowwiseGemm {
  static constexpr bool kTile128 = cute::size<0>(TileShape{}) == 128;
  using Schedule = RowwiseSchedule<kTile128, kFast>;
  using Multiply = fusion::Sm90Compute<cutlass::multiplies, float, float, kRN>;
  using Add = fusion::Sm90Compute<cutlass::plus, float, float, kRN>;
  using XScale = fusion::Sm90ColBroadcast<0, TileShape, float>;
  using WScale = fusion::Sm90RowBroadcast<0, TileShape, float>;
  using Bias = std::conditional_t<kTransposed, fusion::Sm90ColBroadcast<0, TileShape, cutlass::bfloat16_t>,
                                  fusion::Sm90RowBroadcast<0, TileShape, cutlass::bfloat16_t>>;
  using AccumScale = fusion::Sm90EVT<Multiply, WScale, fusion::Sm90EVT<Multiply, XScale, fusion::Sm90AccFetch>>;
  using Cast = fusion::Sm90Compute<cutlass::epilogue::thread::Identity, cutlass::bfloat16_t, float, kRN>;
  using EVT = fusion::Sm90EVT<Cast, fusion::Sm90EVT<Add, Bias, AccumScale>>;
  using LayoutOut = std::conditional_t<kTransposed, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutOut, 8, cutlass::bfloat16_t,
      LayoutOut, 8, typename Schedule::Epilogue, EVT>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::float_e4m3_t, cutlass::layout::RowMajor, 16,
      cutlass::float_e4m3_t, cutlass::layout::ColumnMajor, 16, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Schedule::Kernel>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int>, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static LaunchResult launch(const ScaledMmArgs& a) {
    // `handle_transposition`: the transposed launch computes Dᵀ [N,M] (column-major, i.e. D row-major)
    // with w as operand A and sw as its row ("X") scale, a as operand B and sa as the column ("W") scale.
    const int rows = kTransposed ? a.n : a.m, cols = kTransposed ? a.m : a.n;
    const void* op_a = kTransposed ? a.w : a.a;
    const void* op_b = kTransposed ? a.a : a.w;
    const float* x_scale = kTransposed ? a.sw : a.sa;
    const float* w_scale = kTransposed ? a.sa : a.sw;
    using StrideA = typename Gemm::GemmKernel::StrideA;
    using StrideB = typename Gemm::GemmKernel::StrideB;
    using StrideD = typename Gemm::GemmKernel::StrideD;
    const StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, make_shape(rows, a.k, 1));
    const StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, make_shape(cols, a.k, 1));
    const StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, make_shape(rows, cols, 1));
    typename Gemm::Arguments arguments{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {rows, cols, a.k},
        {static_cast<const cutlass::float_e4m3_t*>(op_a), sa, static_cast<const cutlass::float_e4m3_t*>(op_b), sb},
        {{{{reinterpret_cast<const cutlass::bfloat16_t*>(a.bias)}, {{w_scale}, {{x_scale}, {}, {}}, {}}, {}}, {}},
         nullptr,
         sd,
         reinterpret_cast<cutlass::bfloat16_t*>(a.y),
         sd}};
    arguments.scheduler.max_swizzle_size = a.swizzle;  // PyTorch's, torch_rowwise_choice
    return run_gemm<Gemm>(arguments, a.stream);
  }
};

// The unscaled fp32 accumulator through the rowwise mainloop (identity epilogue, fp32 out).
template <bool kFast>
struct RowwiseAccumulate {
  using TileShape = Shape<_64, _128, _128>;
  using ClusterShape = Shape<_2, _1, _1>;
  using Schedule = RowwiseSchedule<false, kFast>;
  // vLLM's TrivialEpilogue: the accumulator stored as it is (no alpha/beta tree, whose `beta * C +`
  // would turn a -0 into +0).
  using Identity = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::epilogue::thread::Identity, float, float, kRN>,
                                   fusion::Sm90AccFetch>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, 4, float,
      cutlass::layout::RowMajor, 4, typename Schedule::Epilogue,
      Identity>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::float_e4m3_t, cutlass::layout::RowMajor, 16,
      cutlass::float_e4m3_t, cutlass::layout::ColumnMajor, 16, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Schedule::Kernel>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int>, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static LaunchResult launch(const ScaledMmArgs& a) {
    using StrideA = typename Gemm::GemmKernel::StrideA;
    using StrideB = typename Gemm::GemmKernel::StrideB;
    using StrideD = typename Gemm::GemmKernel::StrideD;
    const StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, make_shape(a.m, a.k, 1));
    const StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, make_shape(a.n, a.k, 1));
    const StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, make_shape(a.m, a.n, 1));
    typename Gemm::Arguments arguments{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {a.m, a.n, a.k},
        {static_cast<const cutlass::float_e4m3_t*>(a.a), sa, static_cast<const cutlass::float_e4m3_t*>(a.w), sb},
        {{}, nullptr, sd, a.d, sd}};
    return run_gemm<Gemm>(arguments, a.stream);
  }
};

}  // namespace qc::cutlass_kernels::detail
