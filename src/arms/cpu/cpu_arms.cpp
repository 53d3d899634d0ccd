// `cpu:<epilogue>`: the exact INT8 accumulator followed by one named, bit-exact epilogue formula.
// Every CPU arm shares the one accumulator, so two CPU arms differ only where their formulas do.
#include <fmt/format.h>

#include "accum/fp8_model.hpp"
#include "epilogue/block_models.hpp"
#include "arms/cpu/cpu_arms.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "core/version.hpp"

namespace qc {

namespace {

class CpuEpilogueArm final : public Arm {
 public:
  explicit CpuEpilogueArm(const Epilogue& e) : epilogue_(e) {}

  ArmInfo info() const override {
    ArmInfo i;
    i.label = fmt::format("cpu:{}", epilogue_.name);
    i.description = fmt::format("exact INT8 accumulator + {}", epilogue_.formula);
    i.epilogue = std::string(epilogue_.name);
    i.exposes_accumulator = true;
    return i;
  }

  ArmOutput run(const LayerOperands& ops) override {
    ops.validate();
    ArmOutput out;
    out.y.resize(static_cast<size_t>(ops.m * ops.n));
    const uint16_t* bias = ops.has_bias() ? ops.bias.data() : nullptr;
    ExactAccumulators acc = exact_accumulate(ops.a_q.data(), ops.w_q.data(), {ops.m, ops.n, ops.k});
    apply_epilogue_rows(epilogue_, acc, ops.m, 0, ops.m, ops.a_scale.data(), ops.w_scale.data(), bias, ops.n,
                        out.y.data());
    // INT32 (exact: K * 2^14 < 2^31) is exposed; beyond that proof the arm accumulates in INT64 and
    // exposes no INT32 accumulator.
    if (!acc.wide()) out.acc = std::move(acc.i32);
    out.record = cpu_run_record(info(), fmt::format("qconform exact accumulator ({}) + epilogue {}",
                                                    accum_target_name(), epilogue_.name));
    return out;
  }

 private:
  const Epilogue& epilogue_;
};

}  // namespace

RunRecord cpu_run_record(const ArmInfo& info, std::string kernel) {
  RunRecord r;
  r.arm = info.label;
  r.kernel = std::move(kernel);
  r.epilogue = info.epilogue;
  r.device = cpu_description();
  r.library = fmt::format("qconform {}", version());
  r.build = build_flags();
  return r;
}

void register_cpu_arms() {
  register_arm_backend(ArmBackend{
      "cpu",
      "exact INT8 accumulator + a named production epilogue, emulated bit for bit; fp8-<model>: an FP8 GEMM "
      "under a declared accumulation model (also fp8-blocked-<chunk>, fp8-split-k-<splits>) + the fp8-scaled "
      "epilogue; fp8-block-<form>[+<chain>]: a block-scaled FP8 GEMM under a block model (per K block a chain from "
      "zero, then the promotion form)",
      [] {
        std::vector<std::string> names;
        for (const Epilogue& e : all_epilogues()) names.emplace_back(e.name);
        for (const NamedAccumModel& m : fp8_accumulation_models()) names.push_back("fp8-" + m.name);
        for (const BlockPromotion f : block_promotions()) names.push_back(fmt::format("fp8-block-{}", block_promotion_name(f)));
        return names;
      },
      [](std::string_view variant) -> std::unique_ptr<Arm> {
        if (variant.starts_with("fp8-")) return make_cpu_fp8_arm(variant.substr(4));
        return std::make_unique<CpuEpilogueArm>(epilogue(variant));
      },
      /*variant_is_file=*/false,
      /*fp8_families=*/{{"cpu:fp8-<model>", false}, {"cpu:fp8-block-<form>", true}}});
}

}  // namespace qc
