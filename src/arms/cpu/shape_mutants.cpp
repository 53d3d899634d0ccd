// `mutant-shape:<name>`: positive controls of C8 (invariance, docs/invariance.md): arms that are
// correct at every shape taken alone but change their algorithm with the batch's M, as a kernel's
// shape dispatch does. Kept apart from `mutant:` (the C0–C7 matrix runs at one M, where these are
// correct arms).
//
// `swap-ab-m<T>`: declares `vllm-cutlass-muladd` (vllm-cutlass, a bias multiplied then added, no
// FMA); for M <= T it runs the swap-AB instance, whose epilogue is `vllm-triton` (sa first, a bias
// added after the bf16 rounding: many elements change; without a bias the order alone changes a few
// per million), as SGLang's small-M dispatch does. Its run record says which instance ran
// (`extra.epilogue_instance`, `extra.swap_ab`), as a kernel's record of its dispatch would.
#include <fmt/format.h>

#include <charconv>

#include "arms/cpu/cpu_arms.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

constexpr int64_t kDefaultThreshold = 32;

class SwapAbThresholdMutant final : public Arm {
 public:
  explicit SwapAbThresholdMutant(int64_t threshold) : threshold_(threshold) {}

  ArmInfo info() const override {
    ArmInfo i;
    i.label = fmt::format("mutant-shape:swap-ab-m{}", threshold_);
    i.description = fmt::format(
        "FAULTY on purpose (C8 control): declares vllm-cutlass-muladd, but for M <= {} runs a swap-AB instance whose "
        "epilogue is vllm-triton (sa first, a bias after the bf16 rounding); its run record names the instance",
        threshold_);
    i.epilogue = "vllm-cutlass-muladd";
    i.exposes_accumulator = true;
    i.is_mutant = true;
    i.breaks_stage = "epilogue";
    return i;
  }

  ArmOutput run(const LayerOperands& ops) override {
    ops.validate();
    const bool swap = ops.m <= threshold_;
    const Epilogue& e = epilogue(swap ? "vllm-triton" : "vllm-cutlass-muladd");
    ArmOutput out;
    out.y.resize(static_cast<size_t>(ops.m * ops.n));
    ExactAccumulators acc = exact_accumulate(ops.a_q.data(), ops.w_q.data(), {ops.m, ops.n, ops.k});
    apply_epilogue_rows(e, acc, ops.m, 0, ops.m, ops.a_scale.data(), ops.w_scale.data(),
                        ops.has_bias() ? ops.bias.data() : nullptr, ops.n, out.y.data());
    if (!acc.wide()) out.acc = std::move(acc.i32);
    out.record = cpu_run_record(info(), fmt::format("qconform mutant swap-ab-m{} ({} instance, faulty on purpose)",
                                                    threshold_, swap ? "swap-AB" : "normal"));
    out.record.extra["swap_ab"] = swap;
    out.record.extra["epilogue_instance"] = std::string(e.name);
    return out;
  }

 private:
  int64_t threshold_;
};

}  // namespace

void register_shape_mutant_arms() {
  register_arm_backend(ArmBackend{
      "mutant-shape",
      "positive controls of C8 (invariance): arms that change their epilogue with the batch's M; swap-ab-m<T> "
      "(any T >= 1) takes the swap-AB instance for M <= T",
      [] { return std::vector<std::string>{fmt::format("swap-ab-m{}", kDefaultThreshold)}; },
      [](std::string_view variant) -> std::unique_ptr<Arm> {
        constexpr std::string_view prefix = "swap-ab-m";
        int64_t t = 0;
        if (variant.starts_with(prefix)) {
          const std::string_view digits = variant.substr(prefix.size());
          const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), t);
          if (ec == std::errc() && end == digits.data() + digits.size() && t >= 1) {
            return std::make_unique<SwapAbThresholdMutant>(t);
          }
        }
        QC_FAIL_INPUT("arm `mutant-shape:{}`: expected swap-ab-m<T> with T a positive integer (e.g. swap-ab-m32)",
                      variant);
      }});
}

}  // namespace qc
