// What the two plugin arms share (plugin_inproc.cpp, plugin_isolated.cpp): the library file, its
// descriptor and its validation, the run record, and `PluginArm`, the one base class whose `run` and
// `fp8_accumulate` dispatch a layer (INT8, FP8 kernel, FP8 GEMM, block-scaled) to the two calls a
// mode implements: `run_layer` (the INT8-shaped call) and `call_fp8` (the FP8 GEMM call).
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "accum/fp8_model.hpp"
#include "arms/plugin/plugin_limits.hpp"
#include "arms/plugin/plugin_protocol.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/arm.hpp"
#include "qconform/arm_abi.h"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "core/version.hpp"

namespace qc::plugin_detail {

namespace proto = plugin_protocol;

// The bf16 pattern `y` is filled with before `run`: a quiet NaN, so an element the plugin
// forgets to write fails every check instead of passing as a plausible zero.
inline constexpr uint16_t kUnwrittenBf16 = 0x7FC1;
inline constexpr uint32_t kUnwrittenF32 = 0x7FC00001;  // FP8 calls: `d` before the plugin writes it (a NaN)
// The descriptor's appended `accumulation_model` is read only when `struct_size` covers it.
inline constexpr size_t kArmSizeWithModel = offsetof(qc_arm_v1, accumulation_model) + sizeof(const char*);
// ... and its block fields (revision 3) when it covers them.
inline constexpr size_t kArmSizeWithBlock = offsetof(qc_arm_v1, block_n) + sizeof(int64_t);
inline constexpr size_t kErrorBufferSize = proto::kErrorBufferSize;
inline constexpr size_t kMaxNameBytes = 1024;
using plugin_limits::CallTimeLimit;
using plugin_limits::first_difference;
inline constexpr double kMaxTimeoutSeconds = plugin_limits::kMaxSeconds;



// The library file: resolved and hashed before it is loaded, so the digest identifies the bytes
// that are mapped next.
struct PluginFile {
  std::string path;    // canonical
  std::string sha256;  // "sha256:<hex>"
};

// `given` after `<prefix>:`, resolved and hashed (input errors name the arm).
PluginFile resolve_plugin(std::string_view prefix, std::string_view given);

// The descriptor's fields as read from the library (by this process or by the worker).
struct Descriptor {
  uint32_t abi_version = 0, struct_size = 0;
  bool has_name = false, has_epilogue = false, has_run = false, has_model = false;
  uint64_t flags = 0;
  std::string name, epilogue, accumulation_model;
  // An FP8 kernel (`run` takes the layer's e4m3 codes and scales, writes y), an FP8 GEMM (`run` with
  // `d` writes the unscaled d; every plugin that declares a model is one).
  bool fp8_kernel() const { return (flags & QC_ARM_FLAG_FP8_KERNEL) != 0; }
  bool fp8_gemm() const { return has_model || (flags & QC_ARM_FLAG_FP8_GEMM) != 0; }
  int64_t block_k = 0, block_n = 0;
  // A block-scaled FP8 plugin: a block model declared, or QC_ARM_FLAG_FP8_BLOCK without a model.
  bool block() const {
    return has_model ? is_block_model_name(accumulation_model) : (flags & QC_ARM_FLAG_FP8_BLOCK) != 0;
  }
};

// Everything the library declares, checked before its `run` is ever called.
void validate(const std::string& path, const Descriptor& d);

struct Loaded {
  std::string label;
  PluginFile file;
  Descriptor d;
  bool isolated = false;

  ArmInfo info() const {
    ArmInfo i;
    i.label = label;
    i.description = fmt::format("plugin `{}` ({}), kernel `{}`, {}", printable(file.path), file.sha256,
                                printable(d.name),
                                isolated ? "isolated in a worker process" : "in-process (unprotected)");
    i.epilogue = d.block()                          ? ""
                 : d.fp8_gemm() && !d.fp8_kernel() ? std::string(fp8_epilogue().name)
                 : d.has_epilogue                  ? d.epilogue
                                                   : "";
    i.exposes_accumulator = (d.flags & QC_ARM_FLAG_WRITES_ACC) != 0;
    i.accumulation_model = d.has_model ? d.accumulation_model : "";
    if (d.fp8_kernel() || d.fp8_gemm() || d.block()) i.element = ElementType::e4m3;
    i.block_scaled = d.block() && !d.has_model;
    i.unscaled_entry = d.fp8_gemm() && !d.block();
    i.block_k = d.block_k;
    i.block_n = d.block_n;
    return i;
  }

  nlohmann::json identity_extra() const {
    nlohmann::json x = {{"plugin_path", file.path},
                        {"plugin_sha256", file.sha256},
                        {"abi_version", d.abi_version},
                        {"flags", d.flags},
                        {"isolation", isolated ? "process" : "none"}};
    if (d.has_model) {
      x["accumulation_model"] = d.accumulation_model;
      x["accumulation_model_declared_by"] = "the plugin's descriptor (its declaration, not a measurement)";
    }
    return x;
  }

  // The plugin's message, escaped and cut to a readable length.
  static std::string plugin_message(const char* error) {
    constexpr size_t kShown = 1024;
    const std::string_view raw(error);
    std::string message = error[0] != '\0' ? printable(raw.substr(0, kShown)) : "(the plugin wrote no message)";
    if (raw.size() > kShown) message += fmt::format(" ... ({} more bytes)", raw.size() - kShown);
    return message;
  }

  // An FP8 call returned `rc`: the plugin's refusal is an input error naming the GEMM.
  std::vector<float> finish_fp8(int64_t m, int64_t n, int64_t k, int rc, const char* error, const float* d0) const {
    if (rc != 0) {
      QC_FAIL_INPUT("plugin `{}` (kernel `{}`): run failed with code {} on an FP8 GEMM (m={} n={} k={}): {}",
                    printable(file.path), printable(d.name), rc, m, n, k, plugin_message(error));
    }
    return std::vector<float>(d0, d0 + m * n);
  }

  // The record of an FP8 call (`Arm::fp8_accumulate`).
  nlohmann::json fp8_record() const {
    nlohmann::json r = {{"arm", label}, {"kernel", d.name}, {"plugin", identity_extra()}};
    if (d.has_model) {
      r["accumulation_model"] = d.accumulation_model;
      r["accumulation_formula"] = declared_model_formula(d.accumulation_model);
    }
    return r;
  }

  // `run` of an FP8 kernel plugin: the layer's e4m3 codes (an FP8 layer's own, an INT8 layer's codes
  // re-encoded exactly) with its scales and bias through `layer` (the plugin's INT8-shaped call).
  template <class LayerCall>
  ArmOutput run_kernel(const LayerOperands& ops, LayerCall&& layer) const {
    ops.validate();
    Fp8LayerCodes codes = fp8_layer_codes(label, ops);
    QC_INPUT(codes.a_format == Fp8Format::e4m3 && codes.w_format == Fp8Format::e4m3,
             "arm `{}`: layer `{}`: e5m2 operands: the plugin ABI passes e4m3fn codes only", printable(label),
             printable(ops.name));
    LayerOperands view = ops;
    view.a_q = {reinterpret_cast<const int8_t*>(codes.a.data()), codes.a.size()};
    view.w_q = {reinterpret_cast<const int8_t*>(codes.w.data()), codes.w.size()};
    view.a_type = view.w_type = ElementType::e4m3;
    ArmOutput out = layer(view);
    out.record.extra["operands"] = codes.description;
    return out;
  }

  // A block-scaled layer's scale layout as the ABI passes it (`qc_arm_args_v1`'s block fields).
  struct BlockArgs {
    int64_t block_k = 0, a_scale_cols = 0, w_block_rows = 0, w_scale_cols = 0;
  };
  BlockArgs block_args(const LayerOperands& ops) const {
    return {ops.scale_block_k(), ops.a_scaling.scale_cols(ops.k), ops.w_scaling.block_rows,
            ops.w_scaling.scale_cols(ops.k)};
  }

  // `run` of a block-scaled plugin: its D from `call(codes a, w, block args)`, rounded to bf16 and exposed.
  template <class BlockCall>
  ArmOutput run_block(const LayerOperands& ops, BlockCall&& call) const {
    ops.validate();
    QC_INPUT(!ops.has_bias(), "arm `{}`: layer `{}`: the FP8 arms take no bias (not modelled)", printable(label),
             printable(ops.name));
    check_arm_takes_layer(info(), ops);
    const Fp8LayerCodes codes = fp8_layer_codes(label, ops);
    QC_INPUT(codes.a_format == Fp8Format::e4m3 && codes.w_format == Fp8Format::e4m3,
             "arm `{}`: layer `{}`: e5m2 operands: the plugin ABI passes e4m3fn codes only", printable(label),
             printable(ops.name));
    std::vector<float> d = call(codes.a.data(), codes.w.data(), block_args(ops));
    ArmOutput out;
    out.y.resize(d.size());
    for (size_t i = 0; i < d.size(); ++i) out.y[i] = f32_to_bf16(d[i]);
    out.d = std::move(d);
    out.record.arm = label;
    out.record.kernel = this->d.name;
    out.record.device = cpu_description();
    out.record.library = fmt::format("plugin {} {}", file.path, file.sha256);
    out.record.build = build_flags();
    out.record.extra = identity_extra();
    out.record.extra["operands"] = codes.description;
    out.record.extra["scales"] = ops.scaling_description();
    return out;
  }

  // `run` of an FP8 plugin: the layer's e4m3 codes through `fp8` (the plugin's FP8 call), then the
  // FP8 epilogue, as every FP8 arm does.
  template <class Fp8Call>
  ArmOutput run_fp8(const LayerOperands& ops, Fp8Call&& fp8) const {
    ops.validate();
    QC_INPUT(!ops.has_bias(), "arm `{}`: layer `{}`: the FP8 arms take no bias (not modelled)", printable(label),
             printable(ops.name));
    const Fp8LayerCodes codes = fp8_layer_codes(label, ops);
    QC_INPUT(codes.a_format == Fp8Format::e4m3 && codes.w_format == Fp8Format::e4m3,
             "arm `{}`: layer `{}`: e5m2 operands: the plugin ABI passes e4m3fn codes only", printable(label),
             printable(ops.name));
    const std::vector<float> gemm = fp8(codes.a.data(), codes.w.data(), ops.m, ops.n, ops.k);
    ArmOutput out;
    out.y.resize(gemm.size());
    apply_epilogue(fp8_epilogue(), gemm.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, ops.m, ops.n,
                   out.y.data());
    out.record.arm = label;
    out.record.kernel = d.name;
    out.record.epilogue = std::string(fp8_epilogue().name);
    out.record.device = cpu_description();
    out.record.library = fmt::format("plugin {} {}", file.path, file.sha256);
    out.record.build = build_flags();
    out.record.extra = identity_extra();
    out.record.extra["operands"] = codes.description;
    return out;
  }

  // "arm `plugin:x.so` (kernel `k`) ... on layer `L` (m=.. n=.. k=..)": how every run-time
  // message starts.
  std::string where(const LayerOperands& ops) const {
    return fmt::format("arm `{}` (kernel `{}`) on layer `{}` (m={} n={} k={})", printable(label), printable(d.name),
                       printable(ops.name), ops.m, ops.n, ops.k);
  }

  // After `run` returned `rc`: the plugin's own refusal is an input error (it declined these
  // operands), an undelivered accumulator a broken promise of its descriptor.
  ArmOutput finish(const LayerOperands& ops, int rc, const char* error, int acc_written, std::vector<uint16_t> y,
                   std::vector<int32_t> acc) const {
    if (rc != 0) {
      QC_FAIL_INPUT("plugin `{}` (kernel `{}`): run failed with code {} on layer `{}` (m={} n={} k={}): {}",
                    printable(file.path), printable(d.name), rc, printable(ops.name), ops.m, ops.n, ops.k,
                    plugin_message(error));
    }
    const bool declares_acc = (d.flags & QC_ARM_FLAG_WRITES_ACC) != 0;
    QC_INPUT(!declares_acc || acc_written != 0,
             "plugin `{}` (kernel `{}`): field `flags` declares QC_ARM_FLAG_WRITES_ACC, but run left "
             "`*acc_written` at 0 on layer `{}`", printable(file.path), printable(d.name), printable(ops.name));
    ArmOutput out;
    out.y = std::move(y);
    if (acc_written != 0) out.acc = std::move(acc);
    out.record.arm = label;
    out.record.kernel = d.name;
    out.record.epilogue = d.has_epilogue ? d.epilogue : "";
    out.record.device = cpu_description();
    out.record.library = fmt::format("plugin {} {}", file.path, file.sha256);
    out.record.build = build_flags();
    out.record.extra = identity_extra();
    return out;
  }
};

// An arm backed by a plugin library, in either mode: `run` and `fp8_accumulate` written once.
class PluginArm : public Arm {
 public:
  ArmInfo info() const final { return lp_.info(); }
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) final;
  ArmOutput run(const LayerOperands& ops) final;

 protected:
  // One call of the plugin's `run` on a layer's codes (int8, or an FP8 kernel's e4m3 codes).
  virtual ArmOutput run_layer(const LayerOperands& ops) = 0;
  // An FP8 call; a block-scaled one with `scaled` (the layer, for its scales) and `b` its layout.
  virtual std::vector<float> call_fp8(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                      const LayerOperands* scaled, const Loaded::BlockArgs& b) = 0;

  Loaded lp_;
};

// The two modes (plugin_inproc.cpp, plugin_isolated.cpp).
std::unique_ptr<Arm> make_inproc_plugin_arm(std::string_view variant);
std::unique_ptr<Arm> make_isolated_plugin_arm(std::string_view variant, plugin_limits::CallTimeLimit limit);

}  // namespace qc::plugin_detail
