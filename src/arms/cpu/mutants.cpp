// `mutant:<name>`: deliberately faulty arms, each a realistic bug class, declared to implement
// `vllm-cutlass` (the FP8 one, `fp8-rne-steps`, declares the accumulation model `hopper-fp8-chain`). They are the positive controls: every falsifiable check must be shown to fire.
// Each mutant names the stage it breaks; `qconform mutants` shows which check caught it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "accum/fp8_model.hpp"
#include "arms/cpu/cpu_arms.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "core/parallel.hpp"

namespace qc {

namespace {

enum class Fault {
  int16_saturate,      // pairs of products summed in int16 with saturation (vpmaddubsw-style) before INT32
  int32_wrap,          // INT32 accumulation that wraps silently instead of detecting overflow
  fp32_accumulate,     // integer products accumulated in fp32
  drop_k_tail,         // the last partial K tile (K mod 64) is never accumulated
  acc_bitflip,         // one accumulator element has bit 4 flipped
  bf16_truncate,       // fp32 -> bf16 by truncation instead of round-to-nearest-even
  ftz_epilogue,        // subnormal inputs and results flushed to zero (FTZ/DAZ)
  extra_bf16_rounding, // an extra bf16 rounding between the two scale products
  wrong_scale,         // the weight scale of the neighbouring column is applied
};

struct MutantSpec {
  Fault fault;
  const char* name;
  const char* stage;  // the stage it breaks: "accumulation", "epilogue" or "arithmetic"
  const char* description;
};

constexpr MutantSpec kMutants[] = {
    {Fault::int16_saturate, "int16-saturate", "accumulation",
     "adjacent products summed in int16 with saturation before INT32 accumulation"},
    {Fault::int32_wrap, "int32-wrap", "accumulation", "INT32 accumulation that wraps silently on overflow"},
    {Fault::fp32_accumulate, "fp32-accumulate", "accumulation", "integer products accumulated in fp32"},
    {Fault::drop_k_tail, "drop-k-tail", "accumulation", "the last partial K tile (K mod 64) is dropped"},
    {Fault::acc_bitflip, "acc-bitflip", "accumulation", "bit 4 of one accumulator element flipped"},
    {Fault::bf16_truncate, "bf16-truncate", "epilogue", "fp32 -> bf16 by truncation instead of RNE"},
    {Fault::ftz_epilogue, "ftz-epilogue", "arithmetic", "subnormal inputs and results flushed to zero (FTZ/DAZ)"},
    {Fault::extra_bf16_rounding, "extra-bf16-rounding", "epilogue",
     "an extra bf16 rounding between the weight-scale and activation-scale products"},
    {Fault::wrong_scale, "wrong-scale", "epilogue", "the weight scale of column (n+1) mod N applied to column n"},
};

float ftz(float x) { return classify_f32(x) == FpClass::subnormal ? std::copysign(0.0f, x) : x; }

// The faulty accumulator, a scalar reference with the fault spelled out. Returns int64 so that
// `int32-wrap` can be compared with the exact value, but stores the INT32 the kernel would hold.
int64_t faulty_dot(Fault fault, const int8_t* a, const int8_t* w, int64_t k) {
  switch (fault) {
    case Fault::int16_saturate: {
      int32_t acc = 0;
      for (int64_t i = 0; i < k; i += 2) {
        int32_t pair = int32_t{a[i]} * w[i] + (i + 1 < k ? int32_t{a[i + 1]} * w[i + 1] : 0);
        pair = std::clamp<int32_t>(pair, std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max());
        acc += pair;
      }
      return acc;
    }
    case Fault::int32_wrap: {
      uint32_t acc = 0;  // unsigned arithmetic wraps modulo 2^32, as the hardware register does
      for (int64_t i = 0; i < k; ++i) acc += static_cast<uint32_t>(int32_t{a[i]} * w[i]);
      return static_cast<int32_t>(acc);
    }
    case Fault::fp32_accumulate: {
      float acc = 0.0f;
      for (int64_t i = 0; i < k; ++i) acc += static_cast<float>(int32_t{a[i]} * w[i]);
      return static_cast<int64_t>(acc);
    }
    case Fault::drop_k_tail: {
      int64_t acc = 0;
      for (int64_t i = 0; i < k - k % 64; ++i) acc += int32_t{a[i]} * w[i];
      return acc;
    }
    default: {
      int64_t acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += int32_t{a[i]} * w[i];
      return acc;
    }
  }
}

uint16_t faulty_epilogue(Fault fault, int64_t acc, const LayerOperands& ops, int64_t m, int64_t n) {
  const Epilogue& reference = epilogue("vllm-cutlass");
  const float sa = ops.a_scale[m];
  float sw = ops.w_scale[n];
  switch (fault) {
    case Fault::bf16_truncate:
      return f32_to_bf16_rz(sa * (static_cast<float>(acc) * sw));
    case Fault::ftz_epilogue:
      return f32_to_bf16(ftz(ftz(sa) * ftz(ftz(static_cast<float>(acc) * ftz(sw)))));
    case Fault::extra_bf16_rounding:
      return f32_to_bf16(sa * bf16_to_f32(f32_to_bf16(static_cast<float>(acc) * sw)));
    case Fault::wrong_scale:
      sw = ops.w_scale[(n + 1) % ops.n];
      return reference.apply(acc, sa, sw, std::nullopt, ops.m, ops.n);
    default:
      return reference.apply(acc, sa, sw, ops.has_bias() ? std::optional<uint16_t>(ops.bias[n]) : std::nullopt, ops.m,
                             ops.n);
  }
}

class MutantArm final : public Arm {
 public:
  explicit MutantArm(const MutantSpec& spec) : spec_(spec) {}

  ArmInfo info() const override {
    ArmInfo i = mutant_info(fmt::format("mutant:{}", spec_.name), fmt::format("FAULTY on purpose: {}", spec_.description),
                            spec_.stage);
    i.epilogue = "vllm-cutlass";
    i.exposes_accumulator = true;
    return i;
  }

  ArmOutput run(const LayerOperands& ops) override {
    ops.validate();
    ArmOutput out;
    out.y.resize(static_cast<size_t>(ops.m * ops.n));
    std::vector<int32_t> acc(out.y.size());
    parallel_for(ops.m, 0, [&](int64_t m) {
      for (int64_t n = 0; n < ops.n; ++n) {
        int64_t v = faulty_dot(spec_.fault, &ops.a_q[m * ops.k], &ops.w_q[n * ops.k], ops.k);
        if (spec_.fault == Fault::acc_bitflip && m == ops.m / 2 && n == ops.n / 2) v ^= 0x10;
        // The INT32 register a kernel exposes: values outside INT32 wrap (the exact value was
        // already lost for every fault but `int32-wrap`, which wrapped on purpose).
        acc[m * ops.n + n] = static_cast<int32_t>(static_cast<uint32_t>(v));
        out.y[m * ops.n + n] = faulty_epilogue(spec_.fault, v, ops, m, n);
      }
    });
    out.acc = std::move(acc);
    out.record = cpu_run_record(info(), fmt::format("qconform mutant {} (scalar, faulty on purpose)", spec_.name));
    return out;
  }

 private:
  const MutantSpec& spec_;
};

// `mutant:fp8-rne-steps`: an FP8 arm that declares `hopper-fp8-chain` (13 fraction bits, truncation
// toward zero) but rounds its terms and each step's result to nearest even: the accumulation stage
// broken the way an emulation that "rounds properly" would break it. It exposes its fp32 accumulator,
// so verify can name the stage.
constexpr const char* kFp8MutantName = "fp8-rne-steps";
constexpr const char* kFp8MutantDeclares = "hopper-fp8-chain";

class Fp8RneStepsMutant final : public Arm {
 public:
  Fp8RneStepsMutant() : faulty_(fp8_accumulation_model(kFp8MutantDeclares).model) {
    faulty_.term_rounding = AccumRounding::nearest_even;
    faulty_.result_rounding = AccumRounding::nearest_even;
    validate_accumulation_model(faulty_, kFp8MutantName);
  }

  ArmInfo info() const override {
    return fp8_mutant_info(fmt::format("mutant:{}", kFp8MutantName),
                           fmt::format("FAULTY on purpose: declares {} but rounds each step's terms and result to "
                                       "nearest even instead of truncating: {}",
                                       kFp8MutantDeclares, accumulation_formula(faulty_)),
                           kFp8MutantDeclares);
  }

  ArmOutput run(const LayerOperands& ops) override {
    return fp8_mutant_run(info(), faulty_, ops, fmt::format("qconform mutant {} (faulty on purpose)", kFp8MutantName),
                          kFp8MutantDeclares);
  }

  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    return fp8_mutant_accumulate(info(), faulty_, a, w, m, n, k, record, threads,
                                 fmt::format("qconform mutant {} (faulty on purpose)", kFp8MutantName),
                                 kFp8MutantDeclares);
  }

 private:
  Fp8AccumModel faulty_;
};

}  // namespace

ArmInfo mutant_info(std::string label, std::string description, std::string stage) {
  ArmInfo i;
  i.label = std::move(label);
  i.description = std::move(description);
  i.is_mutant = true;
  i.breaks_stage = std::move(stage);
  return i;
}

ArmInfo fp8_mutant_info(std::string label, std::string description, std::string declares) {
  ArmInfo i = mutant_info(std::move(label), std::move(description), "accumulation");
  i.epilogue = std::string(fp8_epilogue().name);
  i.accumulation_model = std::move(declares);
  return i;
}

ArmOutput fp8_mutant_run(const ArmInfo& info, const Fp8AccumModel& model, const LayerOperands& ops,
                         const std::string& kernel, const std::string& claimed) {
  ops.validate();
  QC_INPUT(!ops.has_bias(), "arm {}: layer `{}`: the FP8 arms take no bias (not modelled)", info.label, ops.name);
  const Fp8LayerCodes codes = fp8_layer_codes(info.label, ops);
  std::vector<float> d(static_cast<size_t>(ops.m * ops.n));
  fp8_model_evaluate(model, codes.gemm(), d.data());
  ArmOutput out;
  out.y.resize(d.size());
  apply_epilogue(fp8_epilogue(), d.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, ops.m, ops.n,
                 out.y.data());
  out.record = cpu_run_record(info, kernel);
  out.record.extra["accumulation_model"] = claimed;
  out.record.extra["operands"] = codes.description;
  return out;
}

std::vector<float> fp8_mutant_accumulate(const ArmInfo& info, const Fp8AccumModel& model, const uint8_t* a,
                                         const uint8_t* w, int64_t m, int64_t n, int64_t k, nlohmann::json& record,
                                         int threads, const std::string& kernel, const std::string& claimed) {
  std::vector<float> d(static_cast<size_t>(m * n));
  fp8_model_evaluate(model, Fp8Gemm{a, Fp8Format::e4m3, w, Fp8Format::e4m3, {m, n, k}}, d.data(), threads);
  record = {{"arm", info.label}, {"kernel", kernel}, {"accumulation_model", claimed}};
  return d;
}

void register_mutant_arms() {
  register_arm_backend(ArmBackend{
      "mutant",
      "deliberately faulty arms (positive controls): each breaks one stage of vllm-cutlass",
      [] {
        std::vector<std::string> names;
        for (const MutantSpec& m : kMutants) names.emplace_back(m.name);
        names.emplace_back(kFp8MutantName);
        return names;
      },
      [](std::string_view variant) -> std::unique_ptr<Arm> {
        std::vector<std::string> names;
        for (const MutantSpec& m : kMutants) {
          if (variant == m.name) return std::make_unique<MutantArm>(m);
          names.emplace_back(m.name);
        }
        if (variant == kFp8MutantName) return std::make_unique<Fp8RneStepsMutant>();
        names.emplace_back(kFp8MutantName);
        QC_FAIL_INPUT("arm `mutant:{}`: unknown mutant; expected one of: {}", variant, fmt::join(names, ", "));
      },
      /*variant_is_file=*/false,
      /*fp8_families=*/{}});
}

}  // namespace qc
