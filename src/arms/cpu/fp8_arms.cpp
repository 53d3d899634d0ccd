// `cpu:fp8-<model>`: an FP8 GEMM evaluated on this CPU under a declared accumulation model
// (src/accum/fp8_model.hpp), then the `fp8-scaled` epilogue. Also the `fp8:` backend, the labels
// `sweep` accepted before the models existed (fp8:sequential, fp8:blocked-<chunk>,
// fp8:split-k-<splits>, fp8:exact): aliases of the same arms that keep their old records, so
// existing commands and sweep JSON stay as they were (docs/sweep.md).
#include <fmt/format.h>

#include <array>

#include "accum/fp8_model.hpp"
#include "arms/cpu/cpu_arms.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {

namespace {

class CpuFp8ModelArm final : public Arm {
 public:
  // `legacy_kernel`: non-empty for the `fp8:` aliases, the kernel text their sweep records had.
  CpuFp8ModelArm(std::string label, NamedAccumModel model, std::string legacy_kernel)
      : label_(std::move(label)), model_(std::move(model)), legacy_kernel_(std::move(legacy_kernel)) {
    validate_accumulation_model(model_.model, model_.name);
  }

  ArmInfo info() const override {
    ArmInfo i;
    i.label = label_;
    i.description = fmt::format("FP8 e4m3 GEMM on the CPU, accumulation model {}: {}", model_.name,
                                accumulation_formula(model_.model));
    i.epilogue = std::string(fp8_epilogue().name);
    i.accumulation_model = model_.name;
    return i;
  }

  ArmOutput run(const LayerOperands& ops) override {
    ops.validate();
    QC_INPUT(!ops.has_bias(), "arm {}: layer `{}`: the FP8 arms take no bias (not modelled)", label_, ops.name);
    const std::vector<uint8_t> a8 = int8_codes_to_e4m3(label_, ops, ops.a_q, "a_q");
    const std::vector<uint8_t> w8 = int8_codes_to_e4m3(label_, ops, ops.w_q, "w_q");
    std::vector<float> d(static_cast<size_t>(ops.m * ops.n));
    const Fp8Gemm g{a8.data(), Fp8Format::e4m3, w8.data(), Fp8Format::e4m3, {ops.m, ops.n, ops.k}};
    fp8_model_evaluate(model_.model, g, d.data());
    ArmOutput out;
    out.y.resize(d.size());
    apply_epilogue(fp8_epilogue(), d.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, ops.m, ops.n,
                   out.y.data());
    out.record = cpu_run_record(info(), kernel(g));
    out.record.extra["accumulation_model"] = model_.name;
    out.record.extra["accumulation_formula"] = accumulation_formula(model_.model);
    out.record.extra["operands"] = "int8 codes re-encoded to e4m3fn, exact (rejected otherwise)";
    return out;
  }

  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    std::vector<float> d(static_cast<size_t>(m * n));
    const Fp8Gemm g{a, Fp8Format::e4m3, w, Fp8Format::e4m3, {m, n, k}};
    fp8_model_evaluate(model_.model, g, d.data(), threads);
    if (!legacy_kernel_.empty()) {
      record = {{"arm", label_}, {"kernel", legacy_kernel_}};
    } else {
      record = {{"arm", label_},
                {"kernel", kernel(g)},
                {"accumulation_model", model_.name},
                {"accumulation_formula", accumulation_formula(model_.model)}};
    }
    return d;
  }

 private:
  std::string kernel(const Fp8Gemm& g) const {
    const Fp8FastPath p = fp8_fast_path(model_.model, g);
    return fmt::format("qconform fp8 model {} ({}{})", model_.name, fast_path_name(p),
                       p == Fp8FastPath::reference ? "" : ", " + fp8_model_target());
  }

  std::string label_;
  NamedAccumModel model_;
  std::string legacy_kernel_;
};

}  // namespace

std::vector<uint8_t> int8_codes_to_e4m3(const std::string& arm, const LayerOperands& ops, std::span<const int8_t> codes,
                                        const char* field) {
  // int8 code -> e4m3fn byte with the same value, or -1 when e4m3 cannot represent it exactly.
  static const std::array<int, 256> table = [] {
    std::array<int, 256> t{};
    for (int v = -128; v <= 127; ++v) {
      const uint8_t b = f32_to_e4m3fn(static_cast<float>(v), /*saturate=*/false);
      t[static_cast<uint8_t>(v)] = e4m3fn_to_f32(b) == static_cast<float>(v) ? b : -1;
    }
    return t;
  }();
  std::vector<uint8_t> out(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) {
    const int b = table[static_cast<uint8_t>(codes[i])];
    QC_INPUT(b >= 0,
             "arm {}: layer `{}` ({}): {}[{},{}] = {} has no exact e4m3 encoding; the FP8 arms take int8 codes only "
             "when every code is an e4m3 value (|q| <= 16, even up to 32, multiples of 4 up to 64, of 8 up to 120), "
             "so that both arms see the same operands (C3). See docs/gpu.md",
             arm, ops.name, ops.source, field, static_cast<int64_t>(i) / ops.k, static_cast<int64_t>(i) % ops.k,
             static_cast<int>(codes[i]));
    out[i] = static_cast<uint8_t>(b);
  }
  return out;
}

std::unique_ptr<Arm> make_cpu_fp8_arm(std::string_view model) {
  return std::make_unique<CpuFp8ModelArm>(fmt::format("cpu:fp8-{}", model), fp8_accumulation_model(model), "");
}

void register_fp8_alias_arms() {
  register_arm_backend(ArmBackend{
      "fp8",
      "aliases kept for existing commands and sweep JSON: fp8:sequential, fp8:blocked-<chunk>, "
      "fp8:split-k-<splits>, fp8:exact are cpu:fp8-sequential, cpu:fp8-blocked-<chunk>, cpu:fp8-split-k-<splits>, "
      "cpu:fp8-exact",
      [] { return std::vector<std::string>{}; },
      [](std::string_view variant) -> std::unique_ptr<Arm> {
        const std::string label = fmt::format("fp8:{}", variant);
        QC_INPUT(variant == "sequential" || variant == "exact" || variant.starts_with("blocked-") ||
                     variant.starts_with("split-k-"),
                 "unknown FP8 arm `{}`; expected fp8:sequential, fp8:blocked-<chunk>, fp8:split-k-<splits>, fp8:exact "
                 "(aliases of cpu:fp8-<model>), cpu:fp8-<model>, cuda:cublaslt-fp8 or cuda:cublaslt-fp8-fastacc",
                 label);
        NamedAccumModel model = fp8_accumulation_model(variant);
        std::string kernel;
        if (variant == "exact") {
          kernel = "cpu fp8 exact sum, rounded once to fp32";
        } else if (variant == "sequential") {
          kernel = "cpu fp8 emulation, fp32 order sequential";
        } else if (variant.starts_with("blocked-")) {
          kernel = fmt::format("cpu fp8 emulation, fp32 order blocked({})", model.model.promote_steps);
        } else {
          kernel = fmt::format("cpu fp8 emulation, fp32 order split-k({})", model.model.splits);
        }
        return std::make_unique<CpuFp8ModelArm>(label, std::move(model), std::move(kernel));
      }});
}

}  // namespace qc
