// The accumulation part of `qconform._qconform`: `exact_accumulate`, `apply_epilogue` (an epilogue on an
// accumulator or an FP8 GEMM's d) and `quantize_activations`.
#include "ext_common.hpp"

#include <optional>

#include "qconform/accumulation.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "epilogue/quantize.hpp"

using namespace nb::literals;

namespace qc::py {

// The exact accumulator, an epilogue applied to an accumulator, the activation quantizers.
void bind_accumulation(nb::module_& m) {
  // ---- accumulation, epilogues, comparison ----
  m.def(
      "exact_accumulate",
      [](AnyArray a_arr, AnyArray w_arr, std::optional<bool> wide, int threads) -> nb::object {
        const HostArray<int8_t> a = host_array<int8_t>(a_arr, "a_q", Elem::i8, {2});
        const HostArray<int8_t> w = host_array<int8_t>(w_arr, "w_q", Elem::i8, {2});
        QC_INPUT(a.dim(1) == w.dim(1), "w_q: expected shape [N,{}] (K of a_q {}), found {}", a.dim(1),
                 shape_text(a.array), shape_text(w.array));
        const qc::AccumShape s{a.dim(0), w.dim(0), a.dim(1)};
        const bool use_wide = wide.value_or(s.k > qc::kAccumMaxKInt32);
        QC_INPUT(use_wide || s.k <= qc::kAccumMaxKInt32,
                 "wide=False: K = {} exceeds {}, the largest K for which an INT32 accumulator provably cannot "
                 "overflow; use wide=True (int64)",
                 s.k, qc::kAccumMaxKInt32);
        const std::vector<size_t> shape{static_cast<size_t>(s.m), static_cast<size_t>(s.n)};
        if (use_wide) {
          std::vector<int64_t> acc(static_cast<size_t>(s.m * s.n));
          without_gil([&] { qc::exact_accumulate_i64(a.data.data(), w.data.data(), s, acc.data(), threads); });
          return numpy_from_vector(std::move(acc), shape);
        }
        std::vector<int32_t> acc(static_cast<size_t>(s.m * s.n));
        without_gil([&] { qc::exact_accumulate_i32(a.data.data(), w.data.data(), s, acc.data(), threads); });
        return numpy_from_vector(std::move(acc), shape);
      },
      "a_q"_a, "w_q"_a, "wide"_a = nb::none(), "threads"_a = 0);

  m.def(
      "apply_epilogue",
      [](const std::string& name, AnyArray acc_arr, AnyArray sa_arr, AnyArray sw_arr, std::optional<AnyArray> bias_arr,
         int threads) -> nb::object {
        const qc::Epilogue& e = qc::epilogue(name);
        const bool wide = acc_arr.dtype() == nb::dtype<int64_t>();
        const bool fp32 = acc_arr.dtype() == nb::dtype<float>();  // an FP8 GEMM's d (an FP8 formula, `fp8-scaled`)
        const HostArray<float> sa = host_array<float>(sa_arr, "a_scale", Elem::f32, {1});
        const HostArray<float> sw = host_array<float>(sw_arr, "w_scale", Elem::f32, {1});
        const int64_t M = sa.dim(0), N = sw.dim(0);
        std::optional<HostArray<uint16_t>> bias;
        if (bias_arr) {
          bias = host_array<uint16_t>(*bias_arr, "bias", Elem::bf16, {1});
          QC_INPUT(bias->dim(0) == N, "bias: expected shape [{}] (N of w_scale), found {}", N, shape_text(bias->array));
        }
        const uint16_t* b = bias ? bias->data.data() : nullptr;
        std::vector<uint16_t> y(static_cast<size_t>(M * N));
        const auto check_acc_shape = [&](const auto& acc) {
          QC_INPUT(acc.dim(0) == M && acc.dim(1) == N, "acc: expected shape [{},{}] (len(a_scale), len(w_scale)), found {}",
                   M, N, shape_text(acc.array));
        };
        if (fp32) {
          const HostArray<float> acc = host_array<float>(acc_arr, "acc", Elem::f32, {2});
          check_acc_shape(acc);
          without_gil([&] { qc::apply_epilogue(e, acc.data.data(), sa.data.data(), sw.data.data(), b, M, N, y.data(), threads); });
        } else if (wide) {
          const HostArray<int64_t> acc = host_array<int64_t>(acc_arr, "acc", Elem::i64, {2});
          check_acc_shape(acc);
          without_gil([&] { qc::apply_epilogue(e, acc.data.data(), sa.data.data(), sw.data.data(), b, M, N, y.data(), threads); });
        } else {
          const HostArray<int32_t> acc = host_array<int32_t>(acc_arr, "acc", Elem::i32, {2});
          check_acc_shape(acc);
          without_gil([&] { qc::apply_epilogue(e, acc.data.data(), sa.data.data(), sw.data.data(), b, M, N, y.data(), threads); });
        }
        return numpy_from_vector(std::move(y), {static_cast<size_t>(M), static_cast<size_t>(N)});
      },
      "name"_a, "acc"_a, "a_scale"_a, "w_scale"_a, "bias"_a = nb::none(), "threads"_a = 0);

  m.def(
      "quantize_activations",
      [](AnyArray x_arr, const std::string& quantizer, std::optional<float> static_scale) -> nb::tuple {
        const qc::ActQuantizer kind = qc::act_quantizer(quantizer);
        QC_INPUT(kind != qc::ActQuantizer::static_ || static_scale, "quantizer `static`: expected static_scale, found none");
        const float* s = static_scale ? &*static_scale : nullptr;
        const bool f32 = elem_matches(Elem::f32, x_arr.dtype());
        std::vector<int8_t> q;
        std::vector<float> scales;
        int64_t M = 0, K = 0;
        const auto sized = [&](int64_t m, int64_t k) {
          M = m, K = k;
          q.resize(static_cast<size_t>(M * K));
          scales.resize(static_cast<size_t>(M));
        };
        if (f32) {
          const HostArray<float> x = host_array<float>(x_arr, "x", Elem::f32, {2});
          sized(x.dim(0), x.dim(1));
          without_gil([&] { qc::quantize_activations(kind, x.data.data(), M, K, q.data(), scales.data(), s); });
        } else {
          const HostArray<uint16_t> x = host_array<uint16_t>(x_arr, "x", Elem::bf16, {2});
          sized(x.dim(0), x.dim(1));
          without_gil([&] { qc::quantize_activations_bf16(kind, x.data.data(), M, K, q.data(), scales.data(), s); });
        }
        return nb::make_tuple(numpy_from_vector(std::move(q), {static_cast<size_t>(M), static_cast<size_t>(K)}),
                              numpy_from_vector(std::move(scales), {static_cast<size_t>(M)}));
      },
      "x"_a, "quantizer"_a = "vllm", "static_scale"_a = nb::none());
}

}  // namespace qc::py
