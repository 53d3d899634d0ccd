// `plugin:<path.so>` and `plugin-inproc:<path.so>`: arms loaded from a shared library through the
// versioned C ABI of `include/qconform/arm_abi.h`.
//
// `plugin:` (the default) runs the library in a worker process, `qconform-plugin-host`
// (host/plugin_host.cpp, protocol in plugin_protocol.hpp): the operands travel in a memfd the
// worker can only map read-only, the outputs in a second one whose buffers end at inaccessible
// pages, and every call has a time limit. A crash, abort, hang, exit() or a write into the inputs
// ends the worker, never qconform, and becomes a qc::Error of kind `arm_failure` (the CLI exits 1)
// naming the arm and the layer; a write into the inputs is named a C3 violation with the element
// it hit. `plugin-inproc:` calls the library in qconform's own process: faster, unprotected.
//
// Both modes validate the library's descriptor with the same code and messages (QC_INPUT, exit 2,
// naming the .so path and the field), and produce bit-identical outputs: the plugin receives the
// same bytes either way.
#include "arms/plugin/plugin_arm.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "accum/fp8_model.hpp"
#include "arms/plugin/plugin_limits.hpp"
#include "epilogue/block_models.hpp"
#include "arms/plugin/plugin_protocol.hpp"
#include "qconform/arm.hpp"
#include "qconform/arm_abi.h"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "core/sha256.hpp"
#include "core/version.hpp"

extern char** environ;

namespace qc {

namespace {

namespace fs = std::filesystem;
namespace proto = plugin_protocol;

// The bf16 pattern `y` is filled with before `run`: a quiet NaN, so an element the plugin
// forgets to write fails every check instead of passing as a plausible zero.
constexpr uint16_t kUnwrittenBf16 = 0x7FC1;
constexpr uint32_t kUnwrittenF32 = 0x7FC00001;  // FP8 calls: `d` before the plugin writes it (a NaN)
// The descriptor's appended `accumulation_model` is read only when `struct_size` covers it.
constexpr size_t kArmSizeWithModel = offsetof(qc_arm_v1, accumulation_model) + sizeof(const char*);
// ... and its block fields (revision 3) when it covers them.
constexpr size_t kArmSizeWithBlock = offsetof(qc_arm_v1, block_n) + sizeof(int64_t);
constexpr size_t kErrorBufferSize = proto::kErrorBufferSize;
constexpr size_t kMaxNameBytes = 1024;
using plugin_limits::CallTimeLimit;
using plugin_limits::first_difference;
constexpr double kMaxTimeoutSeconds = plugin_limits::kMaxSeconds;

std::atomic<double> g_timeout_override{0};  // 0: not set by set_plugin_call_timeout

// ---- what both modes share: the file, the descriptor, the run record --------------------------

// The library file: resolved and hashed before it is loaded, so the digest identifies the bytes
// that are mapped next.
struct PluginFile {
  std::string path;    // canonical
  std::string sha256;  // "sha256:<hex>"
};

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
  bool block() const { return has_model && is_block_model_name(accumulation_model); }
};

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
  constexpr uint64_t kKnownFlags = QC_ARM_FLAG_WRITES_ACC | QC_ARM_FLAG_FP8_KERNEL | QC_ARM_FLAG_FP8_GEMM;
  QC_INPUT((d.flags & ~kKnownFlags) == 0,
           "plugin `{}`: field `flags`: expected only QC_ARM_FLAG_* bits (0x{:x}), found 0x{:x}", p, kKnownFlags, d.flags);
  if (d.fp8_kernel() || d.fp8_gemm()) {
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
             d.block() ? "" : " and only on a block-scaled plugin (a block model as accumulation_model)", d.block_k,
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
    if (d.fp8_kernel() || d.fp8_gemm()) i.element = ElementType::e4m3;
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

// ---- plugin-inproc: the library in this process ----------------------------------------------

std::string dl_error_text() {
  const char* e = dlerror();
  return e ? e : "(no dlerror message)";
}

class InprocPluginArm final : public Arm {
 public:
  explicit InprocPluginArm(std::string_view variant) {
    lp_.label = fmt::format("plugin-inproc:{}", variant);
    lp_.file = resolve_plugin("plugin-inproc", variant);
    const std::string p = printable(lp_.file.path);
    dlerror();
    void* raw = dlopen(lp_.file.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    QC_INPUT(raw != nullptr, "plugin `{}`: dlopen failed: {}", p, printable(dl_error_text()));
    handle_ = std::shared_ptr<void>(raw, [](void* h) { dlclose(h); });
    dlerror();
    void* sym = dlsym(raw, QC_ARM_V1_ENTRY_SYMBOL);
    QC_INPUT(sym != nullptr, "plugin `{}`: symbol `{}` not found (a qconform arm plugin exports `const qc_arm_v1* "
             "{}(void)`, see include/qconform/arm_abi.h): {}", p, QC_ARM_V1_ENTRY_SYMBOL, QC_ARM_V1_ENTRY_SYMBOL,
             printable(dl_error_text()));
    arm_ = reinterpret_cast<qc_arm_v1_entry_fn>(sym)();
    QC_INPUT(arm_ != nullptr, "plugin `{}`: `{}()` returned NULL; expected a pointer to a qc_arm_v1", p,
             QC_ARM_V1_ENTRY_SYMBOL);
    Descriptor& d = lp_.d;
    d.abi_version = arm_->abi_version;
    d.struct_size = arm_->struct_size;
    if (d.abi_version == QC_ARM_ABI_VERSION && d.struct_size >= QC_ARM_V1_MIN_SIZE) {
      if (d.struct_size >= kArmSizeWithModel && arm_->accumulation_model != nullptr) {
        d.has_model = true;
        d.accumulation_model.assign(arm_->accumulation_model, strnlen(arm_->accumulation_model, proto::kMaxString));
      }
      if (d.struct_size >= kArmSizeWithBlock) {
        d.block_k = arm_->block_k;
        d.block_n = arm_->block_n;
      }
      d.has_name = arm_->name != nullptr;
      d.has_epilogue = arm_->epilogue != nullptr;
      d.has_run = arm_->run != nullptr;
      d.flags = arm_->flags;
      if (d.has_name) d.name.assign(arm_->name, strnlen(arm_->name, proto::kMaxString));
      if (d.has_epilogue) d.epilogue.assign(arm_->epilogue, strnlen(arm_->epilogue, proto::kMaxString));
    }
    validate(lp_.file.path, d);
  }

  ArmInfo info() const override { return lp_.info(); }

  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    if (!lp_.d.fp8_gemm()) return Arm::fp8_accumulate(a, w, m, n, k, record, threads);  // the INT8 refusal
    QC_INPUT(!lp_.d.block(),
             "arm `{}` is a block-scaled FP8 plugin (block model {}): its `run` takes scales, so it has no unscaled "
             "FP8 call; run it on a block-scaled layer (`boundary` measures it at unit scales that way)",
             printable(lp_.label), printable(lp_.d.accumulation_model));
    std::vector<float> d = call_fp8(a, w, m, n, k);
    record = lp_.fp8_record();
    return d;
  }

  ArmOutput run(const LayerOperands& ops) override {
    if (lp_.d.block()) {
      return lp_.run_block(ops, [&](const uint8_t* a, const uint8_t* w, const Loaded::BlockArgs& b) {
        return call_fp8(a, w, ops.m, ops.n, ops.k, &ops, b);
      });
    }
    if (lp_.d.fp8_kernel()) return lp_.run_kernel(ops, [&](const LayerOperands& view) { return run_layer(view); });
    if (lp_.d.fp8_gemm()) {
      return lp_.run_fp8(ops, [&](const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k) {
        return call_fp8(a, w, m, n, k);
      });
    }
    return run_layer(ops);
  }

 private:
  // One call of the plugin's `run` on a layer's codes (int8, or an FP8 kernel's e4m3 codes).
  ArmOutput run_layer(const LayerOperands& ops) {
    ops.validate();
    const size_t count = static_cast<size_t>(ops.m * ops.n);
    std::vector<uint16_t> y(count, kUnwrittenBf16);
    std::vector<int32_t> acc(count, 0);
    int acc_written = 0;
    std::vector<char> error(kErrorBufferSize, '\0');

    qc_arm_args_v1 args{};
    args.struct_size = sizeof(qc_arm_args_v1);
    args.m = ops.m;
    args.n = ops.n;
    args.k = ops.k;
    args.a_q = ops.a_q.data();
    args.a_scale = ops.a_scale.data();
    args.w_q = ops.w_q.data();
    args.w_scale = ops.w_scale.data();
    args.bias = ops.has_bias() ? ops.bias.data() : nullptr;
    args.y = y.data();
    args.acc = acc.data();
    args.acc_written = &acc_written;
    args.error = error.data();
    args.error_size = error.size();
    const int rc = arm_->run(arm_->ctx, &args);
    error.back() = '\0';  // a plugin that overran nothing but forgot the terminator still yields a string
    return lp_.finish(ops, rc, error.data(), acc_written, std::move(y), std::move(acc));
  }

  // An FP8 call; a block-scaled one with `scaled` (the layer, for its scales) and `b` its layout.
  std::vector<float> call_fp8(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                              const LayerOperands* scaled = nullptr, const Loaded::BlockArgs& b = {}) {
    float unwritten;
    std::memcpy(&unwritten, &kUnwrittenF32, sizeof unwritten);
    std::vector<float> d(static_cast<size_t>(m * n), unwritten);
    std::vector<char> error(kErrorBufferSize, '\0');
    int acc_written = 0;
    qc_arm_args_v1 args{};
    args.struct_size = sizeof(qc_arm_args_v1);
    args.m = m;
    args.n = n;
    args.k = k;
    args.a_q = reinterpret_cast<const int8_t*>(a);
    args.w_q = reinterpret_cast<const int8_t*>(w);
    args.acc_written = &acc_written;
    args.error = error.data();
    args.error_size = error.size();
    args.d = d.data();
    if (scaled != nullptr) {
      args.a_scale = scaled->a_scale.data();
      args.w_scale = scaled->w_scale.data();
      args.block_k = b.block_k;
      args.a_scale_cols = b.a_scale_cols;
      args.w_block_rows = b.w_block_rows;
      args.w_scale_cols = b.w_scale_cols;
    }
    const int rc = arm_->run(arm_->ctx, &args);
    error.back() = '\0';
    return lp_.finish_fp8(m, n, k, rc, error.data(), d.data());
  }

  Loaded lp_;
  std::shared_ptr<void> handle_;
  const qc_arm_v1* arm_ = nullptr;
};

// ---- plugin: the library in a worker process -------------------------------------------------

bool is_executable(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_regular_file(path, ec) && access(path.c_str(), X_OK) == 0;
}

// Where `qconform-plugin-host` is: $QCONFORM_PLUGIN_HOST, else beside the running executable
// (qconform and the host are built and installed side by side), else where this build put it.
std::string plugin_host_path() {
  if (const char* env = std::getenv("QCONFORM_PLUGIN_HOST"); env != nullptr && env[0] != '\0') {
    QC_INPUT(is_executable(env), "environment variable QCONFORM_PLUGIN_HOST: expected the path of the executable "
             "`qconform-plugin-host`, found `{}` (not an executable file)", printable(env));
    return env;
  }
  std::vector<std::string> tried;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back((self.parent_path() / "qconform-plugin-host").string());
  // Beside the shared object this code is linked into, when that is not the executable (the
  // Python module `_qconform.so`).
  Dl_info where{};
  if (dladdr(reinterpret_cast<void*>(&plugin_host_path), &where) != 0 && where.dli_fname != nullptr) {
    const fs::path object = fs::weakly_canonical(where.dli_fname, ec);
    if (!ec) {
      const std::string beside = (object.parent_path() / "qconform-plugin-host").string();
      if (std::find(tried.begin(), tried.end(), beside) == tried.end()) tried.push_back(beside);
    }
  }
#ifdef QC_PLUGIN_HOST_BUILD_PATH
  tried.push_back(QC_PLUGIN_HOST_BUILD_PATH);
#endif
  for (const std::string& t : tried) {
    if (is_executable(t)) return t;
  }
  std::string list;
  for (const std::string& t : tried) list += (list.empty() ? "" : ", ") + printable(t);
  QC_FAIL_INPUT("isolated plugin arms need the worker executable `qconform-plugin-host`: not found at {} (set "
                "QCONFORM_PLUGIN_HOST to its path, or run the plugin in qconform's process, unprotected, as "
                "`plugin-inproc:<path>`)", list.empty() ? "(no candidate)" : list);
}

double timeout_from_text(std::string_view what, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  QC_INPUT(!s.empty() && end == s.c_str() + s.size() && errno == 0 && std::isfinite(v) && v > 0 &&
               v <= kMaxTimeoutSeconds,
           "{}: expected a number of seconds > 0 and <= {} (one week), found `{}`", what, kMaxTimeoutSeconds,
           printable(s));
  return v;
}

// The limit of an arm made now: fixed by set_plugin_call_timeout (--arm-timeout) or
// $QCONFORM_ARM_TIMEOUT, else the default that follows the work (plugin_limits.hpp).
CallTimeLimit call_time_limit() {
  if (const double set = g_timeout_override.load(); set > 0) return CallTimeLimit(set, "--arm-timeout");
  if (const char* env = std::getenv("QCONFORM_ARM_TIMEOUT"); env != nullptr && env[0] != '\0') {
    return CallTimeLimit(timeout_from_text("environment variable QCONFORM_ARM_TIMEOUT", env), "QCONFORM_ARM_TIMEOUT");
  }
  return CallTimeLimit();
}

const char* signal_name(int s) {
  switch (s) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGABRT: return "SIGABRT";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGTRAP: return "SIGTRAP";
    case SIGSYS: return "SIGSYS";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGPIPE: return "SIGPIPE";
    default: return "signal";
  }
}

using Clock = std::chrono::steady_clock;

enum class ReadStatus { ok, eof, timeout };

// One region of a memfd, mapped read-write in this process.
struct SharedBuffer {
  int fd = -1;
  char* base = nullptr;
  size_t size = 0;
  ~SharedBuffer() {
    if (base) munmap(base, size);
    if (fd >= 0) close(fd);
  }
  // Grows (never shrinks) to at least `want` bytes.
  void reserve(size_t want, const char* what) {
    if (want <= size) return;
    QC_CHECK(ftruncate(fd, static_cast<off_t>(want)) == 0, "isolated plugin arm: cannot grow the {} mapping to {} "
             "bytes: {}", what, want, std::strerror(errno));
    void* p = base ? mremap(base, size, want, MREMAP_MAYMOVE) : mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    QC_CHECK(p != MAP_FAILED, "isolated plugin arm: cannot map {} bytes for the {}: {}", want, what, std::strerror(errno));
    base = static_cast<char*>(p);
    size = want;
  }
};

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

// Where each operand and output lies in the two mappings for one call.
struct Layout {
  struct Piece {
    const char* name;
    uint64_t offset, bytes, element_size;
    int64_t cols;  // 0 for vectors
  };
  std::vector<Piece> inputs;  // a_q, a_scale, w_q, w_scale[, bias]
  uint64_t inputs_size = 0;
  uint64_t acc_written = 0, error = 0, y = 0, acc = 0, y_bytes = 0, acc_bytes = 0, outputs_size = 0;
  uint64_t guards[3] = {0, 0, 0};

  Layout(const LayerOperands& ops, size_t page) {
    const uint64_t m = static_cast<uint64_t>(ops.m), n = static_cast<uint64_t>(ops.n), k = static_cast<uint64_t>(ops.k);
    uint64_t at = 0;
    const auto add = [&](const char* name, uint64_t count, uint64_t size, int64_t cols) {
      inputs.push_back({name, at, count * size, size, cols});
      at = round_up(at + count * size, 64);
    };
    add("a_q", m * k, 1, ops.k);
    add("a_scale", m, 4, 0);
    add("w_q", n * k, 1, ops.k);
    add("w_scale", n, 4, 0);
    if (ops.has_bias()) add("bias", n, 2, 0);
    inputs_size = round_up(std::max<uint64_t>(at, 1), page);
    y_bytes = 2 * m * n;
    acc_bytes = 4 * m * n;
    acc_written = 0;
    place_outputs(page);
  }

  // An FP8 call: inputs the codes `a` [m,k] and `w` [n,k]; the output `d` [m,n] fp32 takes the
  // place of `y` (guarded the same way), no accumulator.
  // A block-scaled call: the scales (`a_scales`, `w_scales` fp32 values) follow the codes.
  Layout(int64_t m64, int64_t n64, int64_t k64, size_t page, size_t a_scales = 0, size_t w_scales = 0) {
    const uint64_t m = static_cast<uint64_t>(m64), n = static_cast<uint64_t>(n64), k = static_cast<uint64_t>(k64);
    inputs.push_back({"a", 0, m * k, 1, k64});
    inputs.push_back({"w", round_up(m * k, 64), n * k, 1, k64});
    uint64_t at = inputs[1].offset + n * k;
    if (a_scales > 0) {
      inputs.push_back({"a_scale", round_up(at, 64), 4 * a_scales, 4, 0});
      inputs.push_back({"w_scale", round_up(inputs[2].offset + 4 * a_scales, 64), 4 * w_scales, 4, 0});
      at = inputs[3].offset + 4 * w_scales;
    }
    inputs_size = round_up(std::max<uint64_t>(at, 1), page);
    y_bytes = 4 * m * n;
    acc_bytes = 0;
    place_outputs(page);
  }

  // Outputs: each buffer starts 64-byte aligned and ends less than 64 bytes before an
  // inaccessible page (`guards`), so a write past its end faults in the worker.
  void place_outputs(size_t page) {
    guards[0] = round_up(64 + kErrorBufferSize, page);
    error = guards[0] - kErrorBufferSize;
    const auto place = [&](uint64_t start, uint64_t bytes, uint64_t& offset, uint64_t& guard) {
      guard = start + round_up(std::max<uint64_t>(bytes, 1), page);
      offset = (guard - bytes) / 64 * 64;
    };
    place(guards[0] + page, y_bytes, y, guards[1]);
    place(guards[1] + page, acc_bytes, acc, guards[2]);
    outputs_size = guards[2] + page;
  }

  // "`w_q` at element [3,17]" for a byte offset into the inputs.
  std::string describe_input(uint64_t offset) const {
    for (const Piece& p : inputs) {
      if (offset >= p.offset && offset < p.offset + p.bytes) {
        const uint64_t e = (offset - p.offset) / p.element_size;
        if (p.cols > 0) return fmt::format("`{}` at element [{},{}]", p.name, e / p.cols, e % p.cols);
        return fmt::format("`{}` at element [{}]", p.name, e);
      }
    }
    return fmt::format("the padding after its operands (byte {} of the operand mapping)", offset);
  }
};

// One worker process and its three descriptors. Started by posix_spawn (fork+exec in one step,
// safe in a multi-threaded process: the child runs nothing of ours before exec).
class Worker {
 public:
  Worker(const std::string& host, const std::string& plugin_path) {
    // Members own their descriptors from here on, so nothing leaks when a step below throws.
    inputs_.fd = memfd_create("qconform-plugin-inputs", MFD_CLOEXEC);
    outputs_.fd = memfd_create("qconform-plugin-outputs", MFD_CLOEXEC);
    QC_CHECK(inputs_.fd >= 0 && outputs_.fd >= 0, "isolated plugin arm: memfd_create: {}", std::strerror(errno));
    int sv[2] = {-1, -1};
    QC_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "isolated plugin arm: socketpair: {}",
             std::strerror(errno));
    sock_.fd = sv[0];
    const int child_sock = sv[1];
    // The worker's view of the inputs is a read-only open file description: a MAP_SHARED mapping
    // of it can never be made writable (mprotect fails with EACCES), whatever the plugin does.
    const int inputs_ro = open(fmt::format("/proc/self/fd/{}", inputs_.fd).c_str(), O_RDONLY | O_CLOEXEC);
    // Lift every child descriptor above the three target numbers first, so that the dup2s to
    // 3, 4, 5 cannot overwrite one another.
    const int fds[3] = {fcntl(child_sock, F_DUPFD_CLOEXEC, 10), inputs_ro < 0 ? -1 : fcntl(inputs_ro, F_DUPFD_CLOEXEC, 10),
                        fcntl(outputs_.fd, F_DUPFD_CLOEXEC, 10)};
    close(child_sock);
    if (inputs_ro >= 0) close(inputs_ro);
    const auto close_fds = [&] {
      for (int fd : fds) if (fd >= 0) close(fd);
    };
    if (fds[0] < 0 || fds[1] < 0 || fds[2] < 0) {
      const int e = errno;
      close_fds();
      QC_FAIL("isolated plugin arm: cannot prepare the worker's descriptors (a read-only reopening of the operand "
              "memfd through /proc/self/fd, then dups): {}", std::strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[0], proto::kSocketFd);
    posix_spawn_file_actions_adddup2(&fa, fds[1], proto::kInputsFd);
    posix_spawn_file_actions_adddup2(&fa, fds[2], proto::kOutputsFd);
    posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);  // qconform's stdout is its summary
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGXFSZ}) {
      sigaddset(&defaults, s);
    }
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    // Its own process group: a failed worker is killed together with any process the plugin
    // started (kill(-pid)). Terminal signals then do not reach it; it ends by itself when
    // qconform does (host/plugin_host.cpp, the watchdog).
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    const std::string version = std::to_string(proto::kProtocolVersion), parent = std::to_string(getpid());
    char* argv[] = {const_cast<char*>(host.c_str()), const_cast<char*>(version.c_str()),
                    const_cast<char*>(plugin_path.c_str()), const_cast<char*>(parent.c_str()), nullptr};
    const int rc = posix_spawn(&pid_, host.c_str(), &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close_fds();
    if (rc != 0) {
      pid_ = 0;
      QC_FAIL_INPUT("isolated plugin arm: cannot start the worker `{}`: {}", printable(host), std::strerror(rc));
    }
  }

  ~Worker() {
    sock_.reset();  // the worker reads end-of-file and leaves
    if (pid_ > 0) (void)reap(std::chrono::milliseconds(1000));
  }

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  SharedBuffer& inputs() { return inputs_; }
  SharedBuffer& outputs() { return outputs_; }

  // Sends `size` bytes; false when the worker is gone.
  bool send(const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t w = ::send(sock_.fd, p, size, MSG_NOSIGNAL);  // never SIGPIPE for a dead worker
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      p += w;
      size -= static_cast<size_t>(w);
    }
    return true;
  }

  // Reads exactly `size` bytes before `deadline`.
  ReadStatus read(void* data, size_t size, Clock::time_point deadline) {
    char* p = static_cast<char*>(data);
    while (size > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return ReadStatus::timeout;
      // At most 100 ms per wait: between waits, a worker that died is noticed even when a
      // process the plugin forked still holds the socket open (no end-of-file would come).
      pollfd pfd{sock_.fd, POLLIN, 0};
      const int pr = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 100)));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) {
        if (pid_ > 0 && ended_unreaped()) return ReadStatus::eof;
        continue;  // the deadline check above decides
      }
      const ssize_t r = ::read(sock_.fd, p, size);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return ReadStatus::eof;
      p += r;
      size -= static_cast<size_t>(r);
    }
    return ReadStatus::ok;
  }

  // True once the worker has ended. It is not reaped (WNOWAIT): while its zombie holds the pid,
  // the process group it leads cannot be reused, so killing that group stays safe.
  bool ended_unreaped() const {
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_;
  }

  // Waits up to `grace` for the worker to end, kills it if it has not, kills whatever it left
  // in its process group (processes the plugin started), reaps it; how it ended, in words.
  std::string reap(std::chrono::milliseconds grace) {
    if (pid_ <= 0) return "the worker process had already ended";
    const auto until = Clock::now() + grace;
    bool ended = ended_unreaped();
    while (!ended && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ended = ended_unreaped();
    }
    kill(-pid_, SIGKILL);
    int status = 0;
    pid_t r = 0;
    do r = waitpid(pid_, &status, 0); while (r < 0 && errno == EINTR);
    pid_ = 0;
    if (!ended) return "the worker process did not end by itself and was killed";
    if (r < 0) return fmt::format("the worker process ended (its status is unavailable: {})", std::strerror(errno));
    if (WIFEXITED(status)) {
      if (WEXITSTATUS(status) == proto::kExitHostProtocol) {
        return fmt::format("the worker process exited with status {}: qconform-plugin-host refused a request "
                           "(its message is above; a qconform bug, or a plugin that exited with this status)",
                           WEXITSTATUS(status));
      }
      return fmt::format("the worker process exited with status {} (the plugin called exit(), _exit() or "
                         "quick_exit(); a plugin must return from `run` instead)", WEXITSTATUS(status));
    }
    if (WIFSIGNALED(status)) {
      const int s = WTERMSIG(status);
      const char* hint = s == SIGABRT   ? " (abort(): a failed assert() or an uncaught C++ exception in the plugin?)"
                         : s == SIGKILL ? " (killed from outside qconform, e.g. by the out-of-memory killer)"
                                        : "";
      return fmt::format("the worker process was killed by {} ({}){}", signal_name(s), strsignal(s), hint);
    }
    return fmt::format("the worker process ended with wait status 0x{:x}", status);
  }

  // Kills the worker at once (a time limit ran out, or it broke the protocol).
  void kill_now() {
    if (pid_ > 0) kill(-pid_, SIGKILL);
    (void)reap(std::chrono::milliseconds(1000));
  }

 private:
  struct Fd {
    int fd = -1;
    ~Fd() { reset(); }
    void reset() {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  };
  pid_t pid_ = 0;
  SharedBuffer inputs_, outputs_;
  Fd sock_;
};

class IsolatedPluginArm final : public Arm {
 public:
  explicit IsolatedPluginArm(std::string_view variant) : variant_(variant) {
    lp_.label = fmt::format("plugin:{}", variant);
    lp_.isolated = true;
    lp_.file = resolve_plugin("plugin", variant);
    host_ = plugin_host_path();
    limit_ = call_time_limit();
    start();
  }

  ArmInfo info() const override { return lp_.info(); }

  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    if (!lp_.d.fp8_gemm()) return Arm::fp8_accumulate(a, w, m, n, k, record, threads);  // the INT8 refusal
    QC_INPUT(!lp_.d.block(),
             "arm `{}` is a block-scaled FP8 plugin (block model {}): its `run` takes scales, so it has no unscaled "
             "FP8 call; run it on a block-scaled layer (`boundary` measures it at unit scales that way)",
             printable(lp_.label), printable(lp_.d.accumulation_model));
    std::vector<float> d = call_fp8(a, w, m, n, k);
    record = lp_.fp8_record();
    return d;
  }

  ArmOutput run(const LayerOperands& ops) override {
    if (lp_.d.block()) {
      return lp_.run_block(ops, [&](const uint8_t* a, const uint8_t* w, const Loaded::BlockArgs& b) {
        return call_fp8(a, w, ops.m, ops.n, ops.k, &ops, b);
      });
    }
    if (lp_.d.fp8_kernel()) return lp_.run_kernel(ops, [&](const LayerOperands& view) { return run_layer(view); });
    if (lp_.d.fp8_gemm()) {
      return lp_.run_fp8(ops, [&](const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k) {
        return call_fp8(a, w, m, n, k);
      });
    }
    return run_layer(ops);
  }

 private:
  // One request to the worker on a layer's codes (int8, or an FP8 kernel's e4m3 codes).
  ArmOutput run_layer(const LayerOperands& ops) {
    ops.validate();
    std::lock_guard<std::mutex> lock(mutex_);  // one request in flight per worker
    if (!worker_) restart();
    const Layout lay(ops, page_size());
    SharedBuffer& in = worker_->inputs();
    SharedBuffer& out = worker_->outputs();
    in.reserve(lay.inputs_size, "operands");
    out.reserve(lay.outputs_size, "outputs");
    const auto copy_in = [&](size_t piece, const void* data) {
      if (lay.inputs[piece].bytes) std::memcpy(in.base + lay.inputs[piece].offset, data, lay.inputs[piece].bytes);
    };
    copy_in(0, ops.a_q.data());
    copy_in(1, ops.a_scale.data());
    copy_in(2, ops.w_q.data());
    copy_in(3, ops.w_scale.data());
    if (ops.has_bias()) copy_in(4, ops.bias.data());
    std::fill_n(reinterpret_cast<uint16_t*>(out.base + lay.y), ops.m * ops.n, kUnwrittenBf16);
    std::memset(out.base + lay.acc, 0, lay.acc_bytes);
    std::memset(out.base + lay.acc_written, 0, sizeof(int));
    std::memset(out.base + lay.error, 0, kErrorBufferSize);

    proto::RunRequest q{};
    q.h = {proto::kMagic, proto::MessageType::run};
    q.m = ops.m;
    q.n = ops.n;
    q.k = ops.k;
    q.inputs_size = in.size;
    q.outputs_size = out.size;
    q.a_q = lay.inputs[0].offset;
    q.a_scale = lay.inputs[1].offset;
    q.w_q = lay.inputs[2].offset;
    q.w_scale = lay.inputs[3].offset;
    q.bias = ops.has_bias() ? lay.inputs[4].offset : proto::kNone;
    q.y = lay.y;
    q.acc = lay.acc;
    q.acc_written = lay.acc_written;
    q.error = lay.error;
    q.d = proto::kNone;
    std::copy(std::begin(lay.guards), std::end(lay.guards), std::begin(q.guards));

    const std::vector<const void*> sources = {ops.a_q.data(), ops.a_scale.data(), ops.w_q.data(), ops.w_scale.data(),
                                              ops.has_bias() ? ops.bias.data() : nullptr};
    const int rc = exchange(q, lay, lp_.where(ops), "y", sources);
    // Everything is read from qconform's own copy of the outputs, taken when `run` returned.
    const char* seen = snapshot_.data();
    std::vector<char> error(seen + lay.error, seen + lay.error + kErrorBufferSize);
    error.back() = '\0';
    int acc_written = 0;
    std::memcpy(&acc_written, seen + lay.acc_written, sizeof acc_written);
    const auto* y0 = reinterpret_cast<const uint16_t*>(seen + lay.y);
    const auto* acc0 = reinterpret_cast<const int32_t*>(seen + lay.acc);
    const size_t count = static_cast<size_t>(ops.m * ops.n);
    std::vector<int32_t> acc;
    if (acc_written != 0) acc.assign(acc0, acc0 + count);
    return lp_.finish(ops, rc, error.data(), acc_written, std::vector<uint16_t>(y0, y0 + count), std::move(acc));
  }

  // One FP8 call: the codes (and, block-scaled, the scales of `scaled` in layout `b`) into the operand
  // mapping, `d` out of the output mapping.
  std::vector<float> call_fp8(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                              const LayerOperands* scaled = nullptr, const Loaded::BlockArgs& b = {}) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!worker_) restart();
    const Layout lay(m, n, k, page_size(), scaled ? scaled->a_scale.size() : 0, scaled ? scaled->w_scale.size() : 0);
    SharedBuffer& in = worker_->inputs();
    SharedBuffer& out = worker_->outputs();
    in.reserve(lay.inputs_size, "operands");
    out.reserve(lay.outputs_size, "outputs");
    std::memcpy(in.base + lay.inputs[0].offset, a, lay.inputs[0].bytes);
    std::memcpy(in.base + lay.inputs[1].offset, w, lay.inputs[1].bytes);
    if (scaled != nullptr) {
      std::memcpy(in.base + lay.inputs[2].offset, scaled->a_scale.data(), lay.inputs[2].bytes);
      std::memcpy(in.base + lay.inputs[3].offset, scaled->w_scale.data(), lay.inputs[3].bytes);
    }
    std::fill_n(reinterpret_cast<uint32_t*>(out.base + lay.y), m * n, kUnwrittenF32);
    std::memset(out.base + lay.acc_written, 0, sizeof(int));
    std::memset(out.base + lay.error, 0, kErrorBufferSize);
    proto::RunRequest q{};
    q.h = {proto::kMagic, proto::MessageType::run};
    q.m = m;
    q.n = n;
    q.k = k;
    q.inputs_size = in.size;
    q.outputs_size = out.size;
    q.a_q = lay.inputs[0].offset;
    q.w_q = lay.inputs[1].offset;
    q.a_scale = q.w_scale = q.bias = q.y = q.acc = proto::kNone;
    q.acc_written = lay.acc_written;
    q.error = lay.error;
    q.d = lay.y;
    if (scaled != nullptr) {
      q.a_scale = lay.inputs[2].offset;
      q.w_scale = lay.inputs[3].offset;
      q.block_k = b.block_k;
      q.a_scale_cols = b.a_scale_cols;
      q.w_block_rows = b.w_block_rows;
      q.w_scale_cols = b.w_scale_cols;
    }
    std::copy(std::begin(lay.guards), std::end(lay.guards), std::begin(q.guards));
    const std::string where =
        scaled != nullptr ? lp_.where(*scaled)
                          : fmt::format("arm `{}` (kernel `{}`) on an FP8 GEMM (m={} n={} k={})", printable(lp_.label),
                                        printable(lp_.d.name), m, n, k);
    const int rc = exchange(q, lay, where, "d",
                            {a, w, scaled ? scaled->a_scale.data() : nullptr, scaled ? scaled->w_scale.data() : nullptr});
    const char* seen = snapshot_.data();
    std::vector<char> error(seen + lay.error, seen + lay.error + kErrorBufferSize);
    error.back() = '\0';
    return lp_.finish_fp8(m, n, k, rc, error.data(), reinterpret_cast<const float*>(seen + lay.y));
  }

  // Sends `q` and waits for `run` to return: its return code, or the arm's failure (a time limit,
  // a fault, the worker's end, a write after `run` returned), named with `where`; `output` names the
  // buffer at `lay.y`; `sources[i]` is what qconform copied into input piece i. On return,
  // `snapshot_` holds the outputs as `run` left them.
  int exchange(const proto::RunRequest& q, const Layout& lay, const std::string& where, const char* output,
               const std::vector<const void*>& sources) {
    const double macs = static_cast<double>(q.m) * static_cast<double>(q.n) * static_cast<double>(q.k);
    const double limit = limit_.for_call(macs);
    const auto started = Clock::now();
    const auto deadline = started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
    if (!worker_->send(&q, sizeof q)) fail(fmt::format("{} failed: {}", where, ended(std::chrono::milliseconds(1000))));

    proto::Header h{};
    ReadStatus st = worker_->read(&h, sizeof h, deadline);
    if (st == ReadStatus::ok && h.magic == proto::kMagic && h.type == proto::MessageType::done) {
      proto::Done d{};
      st = worker_->read(reinterpret_cast<char*>(&d) + sizeof h, sizeof d - sizeof h, deadline);
      if (st == ReadStatus::ok) {
        limit_.record(std::chrono::duration<double>(Clock::now() - started).count(), macs);
        check_after_return(q, lay, where, output, sources, d.outputs_sum);
        return d.rc;
      }
    }
    if (st == ReadStatus::timeout) {
      worker_->kill_now();
      fail(fmt::format("{} failed: `run` did not return within the per-call time limit of {} s ({}); the worker "
                       "process was killed", where, CallTimeLimit::shown(limit), limit_.describe(macs)));
    }
    if (st == ReadStatus::eof) fail(fmt::format("{} failed during `run`: {}", where, ended(std::chrono::milliseconds(1000))));
    if (h.magic == proto::kMagic && h.type == proto::MessageType::fault) fail_fault(lay, where, output, "", deadline);
    worker_->kill_now();
    fail(fmt::format("{} failed: the worker process sent a malformed reply (magic 0x{:x}, type {}); it was killed", where,
                     h.magic, static_cast<uint32_t>(h.type)));
  }

  // The Fault message after its header: the arm's failure, named by the region the plugin hit.
  [[noreturn]] void fail_fault(const Layout& lay, const std::string& where, const char* output, const char* when,
                               Clock::time_point deadline) {
    proto::Fault f{};
    if (worker_->read(reinterpret_cast<char*>(&f) + sizeof(proto::Header), sizeof f - sizeof(proto::Header), deadline) !=
        ReadStatus::ok) {
      fail(fmt::format("{} failed{}: {}", where, when, ended(std::chrono::milliseconds(1000))));
    }
    const std::string how = ended(std::chrono::milliseconds(2000));
    if (f.region == proto::FaultRegion::inputs) {
      fail(fmt::format("{} failed: C3 (shared operands) violated: the plugin wrote into its read-only input {}{}; the "
                       "write was refused (the worker maps the operands read-only) and {}",
                       where, lay.describe_input(f.offset), when, how));
    }
    if (f.region == proto::FaultRegion::guard && f.guard_index < 3) {
      const char* const kBuffers[3] = {"error", output, "acc"};
      const uint64_t end = f.guard_index == 0   ? lay.error + kErrorBufferSize
                           : f.guard_index == 1 ? lay.y + lay.y_bytes
                                                : lay.acc + lay.acc_bytes;
      fail(fmt::format("{} failed: the plugin wrote past the end of its output `{}`{} (byte {} after its last byte; the "
                       "buffer holds {} bytes) and {}", where, kBuffers[f.guard_index], when,
                       lay.guards[f.guard_index] + f.offset - end,
                       f.guard_index == 0 ? kErrorBufferSize : end - (f.guard_index == 1 ? lay.y : lay.acc), how));
    }
    fail(fmt::format("{} failed: invalid memory access{} ({} at address 0x{:x}, si_code {}) and {}", where, when,
                     signal_name(f.signo), f.offset, f.code, how));
  }

  // After Done: the outputs are copied (`snapshot_`) and must still be what `run` left (the worker's
  // sum), the inputs what qconform put there; after the worker's grace period (Settled), both are
  // compared again. A thread of the plugin that writes after `run` returned fails the arm.
  void check_after_return(const proto::RunRequest& q, const Layout& lay, const std::string& where, const char* output,
                          const std::vector<const void*>& sources, uint64_t worker_sum) {
    const SharedBuffer& out = worker_->outputs();
    snapshot_.assign(out.base, out.base + out.size);
    if (proto::outputs_sum(snapshot_.data(), q) != worker_sum) {
      fail(fmt::format("{} failed: the plugin changed its outputs after `run` returned (the worker's sum of them when "
                       "`run` returned differs from qconform's copy taken right after): a thread of the plugin still "
                       "writing?", where));
    }
    // The worker does not sum its inputs (they may be large): a change seen now happened during
    // `run` or just after it, and is named so.
    check_inputs(lay, where, sources, " (during `run`, or by a thread of it right after)");
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    proto::Header h{};
    const ReadStatus st = worker_->read(&h, sizeof h, deadline);
    const char* const kWhen = " after `run` returned (within the grace period)";
    if (st == ReadStatus::ok && h.magic == proto::kMagic && h.type == proto::MessageType::fault) {
      fail_fault(lay, where, output, kWhen, deadline);
    }
    if (st != ReadStatus::ok || h.magic != proto::kMagic || h.type != proto::MessageType::settled) {
      if (st == ReadStatus::eof) fail(fmt::format("{} failed after `run` returned: {}", where, ended(std::chrono::milliseconds(1000))));
      worker_->kill_now();
      fail(fmt::format("{} failed: the worker process did not end the grace period after `run` properly ({}); it was "
                       "killed", where, st == ReadStatus::timeout ? "no message within 10 s" : "a malformed message"));
    }
    check_inputs(lay, where, sources, kWhen);
    const auto mn = static_cast<uint64_t>(q.m) * static_cast<uint64_t>(q.n);
    const struct {
      const char* name;
      uint64_t offset, bytes, element;
    } buffers[] = {{"error", q.error, kErrorBufferSize, 1},
                   {"acc_written", q.acc_written, sizeof(int), sizeof(int)},
                   {output, q.d != proto::kNone ? q.d : q.y, (q.d != proto::kNone ? 4 : 2) * mn, q.d != proto::kNone ? 4u : 2u},
                   {"acc", q.acc, q.acc == proto::kNone ? 0 : 4 * mn, 4}};
    for (const auto& b : buffers) {
      const auto at = first_difference(snapshot_.data() + b.offset, out.base + b.offset, b.bytes);
      if (!at) continue;
      const uint64_t e = *at / b.element;
      const auto bits = [&](const char* base) {
        uint64_t v = 0;
        std::memcpy(&v, base + b.offset + e * b.element, b.element);
        return fmt::format("0x{:0{}x}", v, 2 * b.element);
      };
      fail(fmt::format("{} failed: the plugin wrote into its output `{}`{} ({}: {} when `run` returned, {} after): a "
                       "thread of the plugin still running? Outputs count only as `run` leaves them", where, b.name, kWhen,
                       b.element > 1 && b.bytes == b.element * mn && q.n > 0
                           ? fmt::format("element [{},{}]", e / static_cast<uint64_t>(q.n), e % static_cast<uint64_t>(q.n))
                           : fmt::format("byte {}", e),
                       bits(snapshot_.data()), bits(out.base)));
    }
  }

  // The operand mapping must still hold what qconform copied in: the worker maps it read-only, so
  // a change means the plugin reached it another way (e.g. reopening the memfd writable).
  void check_inputs(const Layout& lay, const std::string& where, const std::vector<const void*>& sources,
                    const char* when) {
    const SharedBuffer& in = worker_->inputs();
    for (size_t i = 0; i < lay.inputs.size() && i < sources.size(); ++i) {
      const Layout::Piece& p = lay.inputs[i];
      if (sources[i] == nullptr || p.bytes == 0) continue;
      if (const auto at = first_difference(static_cast<const char*>(sources[i]), in.base + p.offset, p.bytes)) {
        fail(fmt::format("{} failed: C3 (shared operands) violated: the plugin changed its read-only input {}{} (through "
                         "another mapping of the operand memory than the read-only one it was given)",
                         where, lay.describe_input(p.offset + *at), when));
      }
    }
  }

  static size_t page_size() {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : 4096;
  }

  // How the worker ended; it is gone afterwards (the next run starts a new one).
  std::string ended(std::chrono::milliseconds grace) {
    std::string how = worker_->reap(grace);
    worker_.reset();
    return how;
  }

  [[noreturn]] void fail(const std::string& message) {
    worker_.reset();
    QC_FAIL_ARM("{}; qconform itself is unaffected (plugin arms run in a worker process; see docs/plugins.md)", message);
  }

  // Starts the worker and validates what it reports of the library.
  void start() {
    worker_ = std::make_unique<Worker>(host_, lp_.file.path);
    const std::string p = printable(lp_.file.path);
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_.for_load()));
    const std::string loading = fmt::format("arm `{}` failed while loading `{}` in its worker process", printable(lp_.label), p);
    proto::Header h{};
    ReadStatus st = worker_->read(&h, sizeof h, deadline);
    if (st == ReadStatus::timeout) {
      worker_->kill_now();
      fail(fmt::format("{}: it did not finish loading within the time limit of {} s ({}); the worker process was "
                       "killed", loading, CallTimeLimit::shown(limit_.for_load()), limit_.describe_load()));
    }
    if (st == ReadStatus::eof) fail(fmt::format("{}: {}", loading, ended(std::chrono::milliseconds(1000))));
    const auto read_string = [&](uint64_t size, std::string& s) {
      if (size > proto::kMaxString) return false;
      s.resize(size);
      return worker_->read(s.data(), size, deadline) == ReadStatus::ok;
    };
    if (h.magic == proto::kMagic && h.type == proto::MessageType::load_error) {
      proto::LoadError e{};
      std::string message;
      if (worker_->read(reinterpret_cast<char*>(&e) + sizeof h, sizeof e - sizeof h, deadline) == ReadStatus::ok &&
          read_string(e.message_size, message)) {
        worker_.reset();
        switch (e.what) {
          case proto::LoadFailure::dlopen:
            QC_FAIL_INPUT("plugin `{}`: dlopen failed: {}", p, printable(message));
          case proto::LoadFailure::no_symbol:
            QC_FAIL_INPUT("plugin `{}`: symbol `{}` not found (a qconform arm plugin exports `const qc_arm_v1* "
                          "{}(void)`, see include/qconform/arm_abi.h): {}", p, QC_ARM_V1_ENTRY_SYMBOL,
                          QC_ARM_V1_ENTRY_SYMBOL, printable(message));
          case proto::LoadFailure::entry_null:
            QC_FAIL_INPUT("plugin `{}`: `{}()` returned NULL; expected a pointer to a qc_arm_v1", p,
                          QC_ARM_V1_ENTRY_SYMBOL);
          default:
            break;
        }
      }
    } else if (h.magic == proto::kMagic && h.type == proto::MessageType::hello) {
      proto::Hello hello{};
      Descriptor d;
      if (worker_->read(reinterpret_cast<char*>(&hello) + sizeof h, sizeof hello - sizeof h, deadline) == ReadStatus::ok &&
          read_string(hello.name_size, d.name) && read_string(hello.epilogue_size, d.epilogue) &&
          read_string(hello.model_size, d.accumulation_model)) {
        if (hello.protocol_version != proto::kProtocolVersion) worker_.reset();
        QC_INPUT(hello.protocol_version == proto::kProtocolVersion,
                 "isolated plugin arm: the worker `{}` speaks protocol {}, this qconform {} (a host from another "
                 "build; set QCONFORM_PLUGIN_HOST to this build's)", printable(host_), hello.protocol_version,
                 proto::kProtocolVersion);
        d.abi_version = hello.abi_version;
        d.struct_size = hello.struct_size;
        d.has_name = hello.has_name != 0;
        d.has_epilogue = hello.has_epilogue != 0;
        d.has_run = hello.has_run != 0;
        d.has_model = hello.has_model != 0;
        d.block_k = hello.block_k;
        d.block_n = hello.block_n;
        d.flags = hello.flags;
        if (!lp_.d.name.empty()) {
          // A restart: the library must still be the one first loaded.
          const bool same = d.name == lp_.d.name && d.flags == lp_.d.flags && d.epilogue == lp_.d.epilogue &&
                            d.accumulation_model == lp_.d.accumulation_model && d.block_k == lp_.d.block_k &&
                            d.block_n == lp_.d.block_n;
          if (!same) worker_.reset();
          QC_INPUT(same,
                   "plugin `{}`: its descriptor changed since the arm was created", p);
          return;
        }
        try {
          validate(lp_.file.path, d);
        } catch (const Error&) {
          worker_.reset();
          throw;
        }
        lp_.d = std::move(d);
        return;
      }
    } else if (h.magic == proto::kMagic && h.type == proto::MessageType::fault) {
      proto::Fault f{};
      if (worker_->read(reinterpret_cast<char*>(&f) + sizeof h, sizeof f - sizeof h, deadline) == ReadStatus::ok) {
        fail(fmt::format("{}: invalid memory access ({} at address 0x{:x}) and {}", loading, signal_name(f.signo),
                         f.offset, ended(std::chrono::milliseconds(2000))));
      }
    }
    if (worker_) worker_->kill_now();
    fail(fmt::format("{}: the worker process sent a malformed message (magic 0x{:x}, type {}); it was killed", loading,
                     h.magic, static_cast<uint32_t>(h.type)));
  }

  // A new worker after a failure: the file must still be the one hashed when the arm was made.
  void restart() {
    const PluginFile now = resolve_plugin("plugin", variant_);
    QC_INPUT(now.sha256 == lp_.file.sha256 && now.path == lp_.file.path,
             "plugin `{}`: the file changed since the arm was created ({} then, {} now); refusing to restart its "
             "worker with other code", printable(lp_.file.path), lp_.file.sha256, now.sha256);
    start();
  }

  std::string variant_;
  Loaded lp_;
  std::string host_;
  CallTimeLimit limit_;
  std::vector<char> snapshot_;  // the outputs mapping as `run` left it (exchange)
  std::unique_ptr<Worker> worker_;
  std::mutex mutex_;
};

}  // namespace

void set_plugin_call_timeout(double seconds) {
  QC_INPUT(seconds == 0 || (std::isfinite(seconds) && seconds > 0 && seconds <= kMaxTimeoutSeconds),
           "--arm-timeout: expected a number of seconds > 0 and <= {} (one week), found {}", kMaxTimeoutSeconds, seconds);
  g_timeout_override.store(seconds);
}

double plugin_call_timeout() { return g_timeout_override.load(); }

void register_plugin_arms() {
  register_arm_backend(ArmBackend{
      .prefix = "plugin",
      .help = "an arm loaded from a shared library through the C ABI of include/qconform/arm_abi.h, run in a worker "
              "process (a crash, hang, exit or write into its inputs is the arm's failure, not qconform's): "
              "plugin:<path.so> (see docs/plugins.md)",
      .variants = [] { return std::vector<std::string>{}; },
      .make = [](std::string_view variant) -> std::unique_ptr<Arm> {
        return std::make_unique<IsolatedPluginArm>(variant);
      },
  });
  register_arm_backend(ArmBackend{
      .prefix = "plugin-inproc",
      .help = "the same plugin called inside qconform's own process: faster, UNPROTECTED (a crash or exit() ends "
              "qconform, a hang has no time limit): plugin-inproc:<path.so>",
      .variants = [] { return std::vector<std::string>{}; },
      .make = [](std::string_view variant) -> std::unique_ptr<Arm> {
        return std::make_unique<InprocPluginArm>(variant);
      },
  });
}

}  // namespace qc
