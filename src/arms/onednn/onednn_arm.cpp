// `onednn:s8s8[-<epilogue>]`: oneDNN's int8 matmul producing s32, then a declared epilogue.
//
// a_q [M,K] row-major s8 (oneDNN `src`, strides {K,1}); w_q [N,K] row-major, viewed by oneDNN as
// `weights` [K,N] with strides {1,K} (format `ba`, no copy on our side); `dst` s32 [M,N]
// row-major. The s32 output is exposed unchanged as the arm's accumulator (C4 checks oneDNN
// itself); the epilogue is qconform's bit-exact emulation of the declared formula, so this arm
// isolates oneDNN's accumulation.
#include "arms/onednn/onednn_arm.hpp"

#include <dnnl.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "core/name_table.hpp"
#include "core/version.hpp"

namespace qc {

namespace {

std::string isa_name(dnnl::cpu_isa isa) {
  switch (static_cast<dnnl_cpu_isa_t>(isa)) {
    case dnnl_cpu_isa_all: return "all";
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return fmt::format("isa-0x{:x}", static_cast<unsigned>(isa));
  }
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{} (commit {}, cpu runtime {})", v->major, v->minor, v->patch,
                     v->hash ? v->hash : "?", v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other");
}

// The engine and stream are created once: oneDNN's CPU engine is cheap to keep and the
// primitive cache is keyed on it.
struct OnednnContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};
OnednnContext& context() {
  static OnednnContext ctx;
  return ctx;
}

constexpr std::string_view kDefaultEpilogue = "vllm-cutlass";

class OnednnS8S8Arm final : public Arm {
 public:
  OnednnS8S8Arm(std::string label, const Epilogue& e) : label_(std::move(label)), epilogue_(e) {}

  ArmInfo info() const override {
    ArmInfo i;
    i.label = label_;
    const dnnl_version_t* v = dnnl_version();
    i.description = fmt::format("oneDNN {}.{}.{} matmul s8 x s8 -> s32, then the `{}` epilogue", v->major, v->minor,
                                v->patch, epilogue_.name);
    i.epilogue = std::string(epilogue_.name);
    i.exposes_accumulator = true;
    return i;
  }

  ArmOutput run(const LayerOperands& ops) override {
    ops.validate();
    OnednnMatmul mm = onednn_s8s8_matmul(ops.a_q.data(), ops.w_q.data(), ops.m, ops.n, ops.k);
    ArmOutput out;
    out.y.assign(static_cast<size_t>(ops.m * ops.n), 0);
    apply_epilogue(epilogue_, mm.acc.data(), ops.a_scale.data(), ops.w_scale.data(),
                   ops.has_bias() ? ops.bias.data() : nullptr, ops.m, ops.n, out.y.data());
    out.record.arm = label_;
    out.record.kernel = fmt::format("oneDNN matmul {} (effective isa {})", mm.impl, mm.isa);
    out.record.epilogue = std::string(epilogue_.name);
    out.record.device = cpu_description();
    out.record.library = mm.version;
    out.record.build = build_flags();
    out.record.extra = {{"onednn_impl", mm.impl},
                        {"onednn_effective_isa", mm.isa},
                        {"accumulation_model", std::string(to_string(onednn_accumulation(mm.impl, mm.isa)))},
                        {"weights_format", "ba (w_q [N,K] row-major as [K,N] with strides {1,K})"}};
    for (const char* env : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
      if (const char* value = std::getenv(env)) out.record.extra[env] = value;
    }
    out.acc = std::move(mm.acc);
    return out;
  }

 private:
  std::string label_;
  const Epilogue& epilogue_;
};

std::unique_ptr<Arm> make_onednn_arm(std::string_view variant) {
  QC_INPUT(variant == "s8s8" || variant.starts_with("s8s8-"),
           "arm `onednn:{}`: unknown variant; expected `s8s8` or `s8s8-<epilogue>` (e.g. onednn:s8s8-vllm-triton)",
           variant);
  const std::string_view ep_name = variant == "s8s8" ? kDefaultEpilogue : variant.substr(5);
  return std::make_unique<OnednnS8S8Arm>(fmt::format("onednn:{}", variant), epilogue(ep_name));
}

}  // namespace

OnednnMatmul onednn_s8s8_matmul(const int8_t* a, const int8_t* w, int64_t m, int64_t n, int64_t k) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  QC_INPUT(m > 0 && n > 0 && k > 0, "arm onednn:s8s8: oneDNN matmul needs m, n, k >= 1; got m={} n={} k={}", m, n,
           k);
  OnednnContext& ctx = context();
  OnednnMatmul result;
  result.acc.assign(static_cast<size_t>(m * n), 0);
  try {
    const dnnl::memory::desc src_md(dims{m, k}, dt::s8, dims{k, 1});
    const dnnl::memory::desc wei_md(dims{k, n}, dt::s8, dims{1, k});  // w_q [N,K] row-major == [K,N] `ba`
    const dnnl::memory::desc dst_md(dims{m, n}, dt::s32, dims{n, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), ctx.engine);
    result.impl = pd.impl_info_str();
    // oneDNN's memory objects take non-const handles; it never writes src or weights.
    dnnl::memory src(src_md, ctx.engine, const_cast<int8_t*>(a));
    dnnl::memory wei(wei_md, ctx.engine, const_cast<int8_t*>(w));
    dnnl::memory dst(dst_md, ctx.engine, result.acc.data());
    dnnl::matmul(pd).execute(ctx.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    ctx.stream.wait();
  } catch (const dnnl::error& e) {
    QC_FAIL_INPUT("arm onednn:s8s8: oneDNN refused the s8 matmul m={} n={} k={}: {} (status {})", m, n, k, e.what(),
                  static_cast<int>(e.status));
  }
  // Queried after the first primitive exists: the ISA is fixed from then on.
  result.isa = isa_name(dnnl::get_effective_cpu_isa());
  result.version = onednn_version();
  return result;
}

constexpr NameRow<OnednnAccumulation> kOnednnAccumulationNames[] = {
    {OnednnAccumulation::exact, "exact"},
    {OnednnAccumulation::fp32_above_2p24, "exact to 2^24, fp32-rounded above"},
    {OnednnAccumulation::int16_pair_saturation, "int16 pair saturation"},
    {OnednnAccumulation::unmodelled, "unmodelled"}};

std::string_view to_string(OnednnAccumulation model) { return name_of(kOnednnAccumulationNames, model); }

OnednnAccumulation onednn_accumulation(std::string_view impl, std::string_view isa) {
  // The effective ISA decides which instructions `gemm:jit` uses: `vpdpbusd` (VNNI, exact int32
  // sums) or `vpmaddubsw` (int16 pair sums with saturation).
  const bool vnni = isa == "avx2_vnni" || isa == "avx512_core_vnni" || isa == "avx512_core_bf16" ||
                    isa == "avx512_core_amx";
  if (impl.starts_with("brg:avx512_core_amx")) return OnednnAccumulation::exact;
  if (impl == "brg:avx512_core_vnni") return OnednnAccumulation::fp32_above_2p24;
  if (impl == "gemm:jit") return vnni ? OnednnAccumulation::exact : OnednnAccumulation::int16_pair_saturation;
  return OnednnAccumulation::unmodelled;
}

int32_t onednn_model_dot(OnednnAccumulation model, const int8_t* a, const int8_t* w, int64_t k, int64_t k_split) {
  int64_t exact = 0;
  for (int64_t i = 0; i < k; ++i) exact += int64_t{a[i]} * int64_t{w[i]};
  switch (model) {
    case OnednnAccumulation::exact:
      return static_cast<int32_t>(exact);
    case OnednnAccumulation::fp32_above_2p24:
      // Exact integers up to 2^24 survive the float conversion, so one expression covers both sides.
      return static_cast<int32_t>(static_cast<float>(exact));
    case OnednnAccumulation::int16_pair_saturation: {
      int64_t sum = 0, w_sum = 0;
      const auto block = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; i += 2) {
          int32_t pair = (int32_t{a[i]} + 128) * int32_t{w[i]};
          w_sum += w[i];
          if (i + 1 < end) {
            pair += (int32_t{a[i + 1]} + 128) * int32_t{w[i + 1]};
            w_sum += w[i + 1];
          }
          sum += std::clamp(pair, -32768, 32767);
        }
      };
      const int64_t split = k_split > 0 && k_split < k ? k_split : k;
      block(0, split);
      block(split, k);
      return static_cast<int32_t>(static_cast<uint32_t>(sum - 128 * w_sum));
    }
    case OnednnAccumulation::unmodelled:
      break;
  }
  QC_FAIL("onednn_model_dot: no model for this kernel (unmodelled)");
}

void register_onednn_arms() {
  register_arm_backend(ArmBackend{
      .prefix = "onednn",
      .help = "oneDNN int8 matmul (s8 x s8 -> s32, exposed as the accumulator) then a declared epilogue; "
              "`onednn:s8s8` uses `vllm-cutlass`, `onednn:s8s8-<epilogue>` any other",
      .variants =
          [] {
            std::vector<std::string> v{"s8s8"};
            for (const Epilogue& e : all_epilogues()) v.push_back(fmt::format("s8s8-{}", e.name));
            return v;
          },
      .make = make_onednn_arm,
      .variant_is_file = false,
      .fp8_families = {},
  });
}

}  // namespace qc
