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
//
// `fp8-splitk-m<T>`: an FP8 arm that declares `hopper-fp8-chain` and, for M <= T, splits K in 4 (the
// model `hopper-fp8-chain-splitk-4`), as cuBLASLt's heuristic does at small M and large K; its record
// claims the model of each run (`extra.accumulation_model`, `extra.split_k`), as the cuBLASLt arms' do.
#include <fmt/format.h>

#include <charconv>

#include "accum/fp8_model.hpp"
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
    ArmInfo i = mutant_info(
        fmt::format("mutant-shape:swap-ab-m{}", threshold_),
        fmt::format("FAULTY on purpose (C8 control): declares vllm-cutlass-muladd, but for M <= {} runs a swap-AB "
                    "instance whose epilogue is vllm-triton (sa first, a bias after the bf16 rounding); its run record "
                    "names the instance",
                    threshold_),
        "epilogue");
    i.epilogue = "vllm-cutlass-muladd";
    i.exposes_accumulator = true;
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

constexpr const char* kFp8Declared = "hopper-fp8-chain";
constexpr const char* kFp8Split = "hopper-fp8-chain-splitk-4";

class Fp8SplitKThresholdMutant final : public Arm {
 public:
  explicit Fp8SplitKThresholdMutant(int64_t threshold) : threshold_(threshold) {}

  ArmInfo info() const override {
    return fp8_mutant_info(fmt::format("mutant-shape:fp8-splitk-m{}", threshold_),
                           fmt::format("FAULTY on purpose (C8 control): an FP8 GEMM that declares {} but for M <= {} "
                                       "splits K in 4 ({}); its run record claims the model of each run",
                                       kFp8Declared, threshold_, kFp8Split),
                           kFp8Declared);
  }

  ArmOutput run(const LayerOperands& ops) override {
    QC_INPUT(!ops.block_scaled(), "arm {}: layer `{}`: takes per-token/per-channel scales, found {}", info().label,
             ops.name, ops.scaling_description());
    const bool split = ops.m <= threshold_;
    ArmOutput out = fp8_mutant_run(info(), model(ops.m), ops, kernel(split), split ? kFp8Split : kFp8Declared);
    out.record.extra["split_k"] = split ? 4 : 1;
    return out;
  }

  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    return fp8_mutant_accumulate(info(), model(m), a, w, m, n, k, record, threads, kernel(m <= threshold_),
                                 m <= threshold_ ? kFp8Split : kFp8Declared);
  }

 private:
  Fp8AccumModel model(int64_t m) const {
    return fp8_accumulation_model(m <= threshold_ ? kFp8Split : kFp8Declared).model;
  }
  std::string kernel(bool split) const {
    return fmt::format("qconform mutant fp8-splitk-m{} (split-K {}, faulty on purpose)", threshold_, split ? 4 : 1);
  }

  int64_t threshold_;
};

// `<prefix><T>` with T a positive integer: T, else 0.
int64_t threshold_of(std::string_view variant, std::string_view prefix) {
  if (!variant.starts_with(prefix)) return 0;
  const std::string_view digits = variant.substr(prefix.size());
  int64_t t = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), t);
  return ec == std::errc() && end == digits.data() + digits.size() && t >= 1 ? t : 0;
}

}  // namespace

void register_shape_mutant_arms() {
  register_arm_backend(ArmBackend{
      "mutant-shape",
      "positive controls of C8 (invariance): arms that change their algorithm with the batch's M; swap-ab-m<T> "
      "(any T >= 1) takes the swap-AB instance (another epilogue) for M <= T, fp8-splitk-m<T> splits K in 4 for M <= T",
      [] {
        return std::vector<std::string>{fmt::format("swap-ab-m{}", kDefaultThreshold),
                                        fmt::format("fp8-splitk-m{}", kDefaultThreshold)};
      },
      [](std::string_view variant) -> std::unique_ptr<Arm> {
        if (const int64_t t = threshold_of(variant, "swap-ab-m")) return std::make_unique<SwapAbThresholdMutant>(t);
        if (const int64_t t = threshold_of(variant, "fp8-splitk-m")) return std::make_unique<Fp8SplitKThresholdMutant>(t);
        QC_FAIL_INPUT("arm `mutant-shape:{}`: expected swap-ab-m<T> or fp8-splitk-m<T> with T a positive integer (e.g. "
                      "swap-ab-m32)",
                      variant);
      }});
}

}  // namespace qc
