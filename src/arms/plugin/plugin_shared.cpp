// What the two plugin arms share: resolving and validating the library, and `PluginArm`'s dispatch.
#include "arms/plugin/plugin_shared.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/sha256.hpp"

namespace qc::plugin_detail {

namespace fs = std::filesystem;

PluginFile resolve_plugin(std::string_view prefix, std::string_view given) {
  QC_INPUT(!given.empty(), "arm `{}:`: expected a path to a shared library, e.g. {}:./libmyarm.so", prefix, prefix);
  std::error_code ec;
  const fs::path p{std::string(given)};
  QC_INPUT(fs::is_regular_file(p, ec), "arm `{}:{}`: file `{}` not found (expected an existing shared library; "
           "the library search path is not used)", prefix, printable(given), printable(given));
  PluginFile f;
  f.path = fs::canonical(p, ec).string();
  QC_INPUT(!ec, "arm `{}:{}`: cannot resolve `{}`: {}", prefix, printable(given), printable(given), ec.message());
  f.sha256 = sha256_file(f.path);
  return f;
}

// Everything the library declares, checked before its `run` is ever called.
void validate(const std::string& path, const Descriptor& d) {
  const std::string p = printable(path);
  // `abi_version` and `struct_size` lead every version of the struct, so they are checked first.
  QC_INPUT(d.abi_version == QC_ARM_ABI_VERSION,
           "plugin `{}`: field `abi_version`: expected {} (QC_ARM_ABI_VERSION of this qconform), found {}", p,
           QC_ARM_ABI_VERSION, d.abi_version);
  QC_INPUT(d.struct_size >= QC_ARM_V1_MIN_SIZE,
           "plugin `{}`: field `struct_size`: expected >= {} (QC_ARM_V1_MIN_SIZE, the first qc_arm_v1), found {}", p,
           QC_ARM_V1_MIN_SIZE, d.struct_size);
  QC_INPUT(d.has_name && !d.name.empty(),
           "plugin `{}`: field `name`: expected a non-empty kernel identity string, found {}", p,
           d.has_name ? "\"\"" : "NULL");
  QC_INPUT(d.name.size() <= kMaxNameBytes, "plugin `{}`: field `name`: expected at most {} bytes (a kernel identity), "
           "found {}{}", p, kMaxNameBytes, d.name.size() >= plugin_protocol::kMaxString ? "at least " : "", d.name.size());
  // The name is printed and recorded as the kernel's identity: a control character in it could
  // rewrite the terminal or hide text, so it is refused rather than echoed.
  const bool controls = std::any_of(d.name.begin(), d.name.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7F;
  });
  QC_INPUT(!controls, "plugin `{}`: field `name`: expected printable characters, found \"{}\" (control characters "
           "escaped as \\xNN)", p, printable(d.name));
  QC_INPUT(d.has_run, "plugin `{}`: field `run`: expected a function pointer, found NULL", p);
  constexpr uint64_t kKnownFlags =
      QC_ARM_FLAG_WRITES_ACC | QC_ARM_FLAG_FP8_KERNEL | QC_ARM_FLAG_FP8_GEMM | QC_ARM_FLAG_FP8_BLOCK;
  QC_INPUT(!(d.has_model && (d.flags & QC_ARM_FLAG_FP8_BLOCK) != 0 && !is_block_model_name(d.accumulation_model)),
           "plugin `{}`: field `flags`: QC_ARM_FLAG_FP8_BLOCK with the accumulation model \"{}\", which is not a block "
           "model (`block-<form>[+<chain>]`)", p, printable(d.accumulation_model));
  QC_INPUT(!((d.flags & QC_ARM_FLAG_FP8_BLOCK) != 0 && (d.flags & (QC_ARM_FLAG_FP8_KERNEL | QC_ARM_FLAG_FP8_GEMM)) != 0),
           "plugin `{}`: field `flags`: QC_ARM_FLAG_FP8_BLOCK with QC_ARM_FLAG_FP8_KERNEL or QC_ARM_FLAG_FP8_GEMM: a "
           "block-scaled plugin's `run` takes the scales and writes D, it has no unscaled GEMM", p);
  QC_INPUT((d.flags & ~kKnownFlags) == 0,
           "plugin `{}`: field `flags`: expected only QC_ARM_FLAG_* bits (0x{:x}), found 0x{:x}", p, kKnownFlags, d.flags);
  if (d.fp8_kernel() || d.fp8_gemm() || d.block()) {
    // An FP8 plugin: a declared model is one qconform can evaluate (unscaled or block-scaled), and there
    // is no INT32 accumulator.
    if (d.has_model) {
      try {
        check_declared_model(d.accumulation_model);
      } catch (const Error& e) {
        QC_FAIL_INPUT("plugin `{}`: field `accumulation_model`: {}", p, printable(e.what()));
      }
    }
    QC_INPUT((d.flags & QC_ARM_FLAG_WRITES_ACC) == 0, "plugin `{}`: field `flags`: QC_ARM_FLAG_WRITES_ACC on an FP8 "
             "plugin (QC_ARM_FLAG_FP8_KERNEL, QC_ARM_FLAG_FP8_GEMM or an accumulation_model): it has no INT32 "
             "accumulator", p);
    QC_INPUT(!(d.block() && d.fp8_kernel()), "plugin `{}`: field `flags`: QC_ARM_FLAG_FP8_KERNEL with the block model "
             "\"{}\": a block-scaled plugin's `run` writes its fp32 D (qconform rounds it); whole block-scaled kernels "
             "with their own output rounding are not supported", p, printable(d.accumulation_model));
    QC_INPUT(d.block_k >= 0 && d.block_n >= 0 && (d.block() || (d.block_k == 0 && d.block_n == 0)),
             "plugin `{}`: fields `block_k`, `block_n`: expected 0 (any) or a positive block{}, found {} and {}", p,
             d.block() ? "" : " and only on a block-scaled plugin (a block model as accumulation_model, or "
                              "QC_ARM_FLAG_FP8_BLOCK)", d.block_k,
             d.block_n);
    if (!d.fp8_kernel()) {
      QC_INPUT(!d.has_epilogue, "plugin `{}`: field `epilogue`: expected NULL for an FP8 plugin that is a GEMM (qconform {}; "
               "a kernel with its own epilogue sets QC_ARM_FLAG_FP8_KERNEL), found \"{}\"", p,
               d.block() ? "rounds its fp32 D to bf16 itself" : fmt::format("applies the `{}` epilogue to its fp32 output",
                                                                            fp8_epilogue().name),
               printable(d.epilogue));
    } else if (d.has_epilogue) {
      const Epilogue* e = nullptr;
      try {
        e = &qc::epilogue(d.epilogue);
      } catch (const Error& err) {
        QC_FAIL_INPUT("plugin `{}`: field `epilogue`: {}", p, printable(err.what()));
      }
      QC_INPUT(e->name == fp8_epilogue().name || (e->kind == EpilogueKind::point && e->space.input == FormulaInput::fp32),
               "plugin `{}`: field `epilogue`: \"{}\" is a formula over an integer accumulator; an FP8 kernel's epilogue "
               "is written over the fp32 GEMM result d, e.g. \"bf16(rn32(sa * rn32(d * sw)))\"", p, printable(d.epilogue));
    }
  } else if (d.has_epilogue) {
    try {
      (void)qc::epilogue(d.epilogue);
    } catch (const Error& e) {
      QC_FAIL_INPUT("plugin `{}`: field `epilogue`: {}", p, printable(e.what()));
    }
  }
}

std::vector<float> PluginArm::fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                             nlohmann::json& record, int threads) {
  if (!lp_.d.fp8_gemm() && !lp_.d.block()) return Arm::fp8_accumulate(a, w, m, n, k, record, threads);  // the INT8 refusal
  QC_INPUT(!lp_.d.block(),
           "arm `{}` is a block-scaled FP8 plugin (block model {}): its `run` takes scales, so it has no unscaled "
           "FP8 call; run it on a block-scaled layer (`boundary` measures it at unit scales that way)",
           printable(lp_.label), lp_.d.has_model ? printable(lp_.d.accumulation_model) : std::string("undeclared"));
  std::vector<float> d = call_fp8(a, w, m, n, k, nullptr, {});
  record = lp_.fp8_record();
  return d;
}

ArmOutput PluginArm::run(const LayerOperands& ops) {
  if (lp_.d.block()) {
    return lp_.run_block(ops, [&](const uint8_t* a, const uint8_t* w, const Loaded::BlockArgs& b) {
      return call_fp8(a, w, ops.m, ops.n, ops.k, &ops, b);
    });
  }
  if (lp_.d.fp8_kernel()) return lp_.run_kernel(ops, [&](const LayerOperands& view) { return run_layer(view); });
  if (lp_.d.fp8_gemm()) {
    return lp_.run_fp8(ops, [&](const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k) {
      return call_fp8(a, w, m, n, k, nullptr, {});
    });
  }
  return run_layer(ops);
}

}  // namespace qc::plugin_detail
