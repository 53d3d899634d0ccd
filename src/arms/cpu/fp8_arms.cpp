// `cpu:fp8-<model>`: an FP8 GEMM evaluated on this CPU under a declared accumulation model
// (src/accum/fp8_model.hpp), then the `fp8-scaled` epilogue; `cpu:fp8-block-<model>`, a block-scaled
// FP8 GEMM under a block model (src/epilogue/block_models.hpp). Also the `fp8:` backend, the labels
// `sweep` accepted before the models existed (fp8:sequential, fp8:blocked-<chunk>,
// fp8:split-k-<splits>, fp8:exact): aliases of the same arms that keep their old records, so
// existing commands and sweep JSON stay as they were (docs/sweep.md).
#include <fmt/format.h>

#include <array>

#include "accum/fp8_model.hpp"
#include "arms/cpu/cpu_arms.hpp"
#include "epilogue/block_models.hpp"
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
    i.description = fmt::format("FP8 GEMM on the CPU, accumulation model {}: {}", model_.name,
                                accumulation_formula(model_.model));
    i.epilogue = std::string(fp8_epilogue().name);
    i.accumulation_model = model_.name;
    return i;
  }

  ArmOutput run(const LayerOperands& ops) override {
    ops.validate();
    QC_INPUT(!ops.has_bias(), "arm {}: layer `{}`: the FP8 arms take no bias (not modelled)", label_, ops.name);
    const Fp8LayerCodes codes = fp8_layer_codes(label_, ops);
    std::vector<float> d(static_cast<size_t>(ops.m * ops.n));
    const Fp8Gemm g = codes.gemm();
    fp8_model_evaluate(model_.model, g, d.data());
    ArmOutput out;
    out.y.resize(d.size());
    apply_epilogue(fp8_epilogue(), d.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, ops.m, ops.n,
                   out.y.data());
    out.record = cpu_run_record(info(), kernel(g));
    out.record.extra["accumulation_model"] = model_.name;
    out.record.extra["accumulation_formula"] = accumulation_formula(model_.model);
    out.record.extra["operands"] = codes.description;
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

// `cpu:fp8-block-<model>`: a block-scaled FP8 GEMM evaluated on this CPU under a block model
// (src/epilogue/block_models.hpp): per K block of the layer's scales the model's chain from zero, its
// promotion form into an fp32 D, then bf16 = RNE(D). D is exposed (`ArmOutput::d`).
class CpuFp8BlockArm final : public Arm {
 public:
  explicit CpuFp8BlockArm(BlockModel model) : label_(fmt::format("cpu:fp8-{}", model.name)), model_(std::move(model)) {
    validate_accumulation_model(model_.chain.model, model_.chain.name);
  }

  ArmInfo info() const override {
    ArmInfo i;
    i.label = label_;
    i.description = fmt::format("block-scaled FP8 GEMM on the CPU, block model {}: {}", model_.name,
                                block_model_formula(model_));
    i.accumulation_model = model_.name;
    return i;
  }

  ArmOutput run(const LayerOperands& ops) override {
    ops.validate();
    QC_INPUT(!ops.has_bias(), "arm {}: layer `{}`: the FP8 arms take no bias (not modelled)", label_, ops.name);
    check_arm_takes_layer(info(), ops);
    const Fp8LayerCodes codes = fp8_layer_codes(label_, ops);
    const Fp8BlockGemm g = fp8_block_gemm(label_, codes, ops);
    validate_block_model_for(model_, g, fmt::format("arm {}: layer `{}`", label_, ops.name));
    std::vector<float> d(static_cast<size_t>(ops.m * ops.n));
    fp8_block_evaluate(model_, g, d.data());
    ArmOutput out;
    out.y.resize(d.size());
    for (size_t i = 0; i < d.size(); ++i) out.y[i] = formula::bf16_rn(d[i]);
    out.d = std::move(d);
    out.record = cpu_run_record(info(), kernel(codes.gemm()));
    out.record.extra["accumulation_model"] = model_.name;
    out.record.extra["accumulation_formula"] = block_model_formula(model_);
    out.record.extra["operands"] = codes.description;
    out.record.extra["scales"] = ops.scaling_description();
    return out;
  }

  // The unscaled interface (`boundary`'s measurement): every scale 1, K blocks of `kUnitBlockK`, which
  // every form turns into the chain promoted into fp32 once per block; the record claims the unscaled
  // model that equals (`unit_scale_equivalent`), or refuses one when the table names none.
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    const Fp8Gemm codes{a, Fp8Format::e4m3, w, Fp8Format::e4m3, {m, n, k}};
    const int64_t blocks = (k + kUnitBlockK - 1) / kUnitBlockK;
    const std::vector<float> a_ones(static_cast<size_t>(m * blocks), 1.0f), w_ones(static_cast<size_t>(n * blocks), 1.0f);
    Fp8BlockGemm g;
    g.codes = codes;
    g.a_scale = a_ones;
    g.w_scale = w_ones;
    g.a_scaling = ScaleLayout::token_group(kUnitBlockK);
    g.w_scaling = ScaleLayout::block(1, kUnitBlockK);
    g.block_k = kUnitBlockK;
    std::vector<float> d(static_cast<size_t>(m * n));
    fp8_block_evaluate(model_, g, d.data(), threads);
    record = {{"arm", label_},
              {"kernel", kernel(codes)},
              {"scales", fmt::format("every scale 1, K blocks of {}", kUnitBlockK)}};
    if (const std::optional<std::string> eq = unit_scale_equivalent(model_, kUnitBlockK)) {
      record["accumulation_model"] = *eq;
      record["accumulation_formula"] = accumulation_formula(fp8_accumulation_model(*eq).model);
    } else {
      record["accumulation_model"] = nullptr;
      record["accumulation_model_refused"] = fmt::format(
          "{} at unit scales over K blocks of {} is its chain {} promoted into fp32 once per block, a model the "
          "accumulation table has no name for",
          model_.name, kUnitBlockK, model_.chain.name);
    }
    return d;
  }

 private:
  static constexpr int64_t kUnitBlockK = 128;

  std::string kernel(const Fp8Gemm& g) const {
    const Fp8FastPath p = fp8_fast_path(model_.chain.model, g);
    return fmt::format("qconform fp8 block model {} (per block: {}{})", model_.name, fast_path_name(p),
                       p == Fp8FastPath::reference ? "" : ", " + fp8_model_target());
  }

  std::string label_;
  BlockModel model_;
};

}  // namespace

std::unique_ptr<Arm> make_cpu_fp8_arm(std::string_view model) {
  if (is_block_model_name(model)) return std::make_unique<CpuFp8BlockArm>(fp8_block_model(model));
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
      },
      /*variant_is_file=*/false,
      /*fp8_families=*/{}});  // aliases of cpu:fp8-<model>, listed there
}

}  // namespace qc
