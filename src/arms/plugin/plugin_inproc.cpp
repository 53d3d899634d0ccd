// `plugin-inproc:<path.so>`: the plugin library dlopen()ed and called in qconform's own process
// (faster, unprotected). What it shares with `plugin:` is in plugin_shared.hpp.
#include <dlfcn.h>

#include <cstring>
#include <memory>

#include "arms/plugin/plugin_shared.hpp"

namespace qc::plugin_detail {

namespace {

std::string dl_error_text() {
  const char* e = dlerror();
  return e ? e : "(no dlerror message)";
}

class InprocPluginArm final : public PluginArm {
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

 private:
  ArmOutput run_layer(const LayerOperands& ops) override {
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

  std::vector<float> call_fp8(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                              const LayerOperands* scaled, const Loaded::BlockArgs& b) override {
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

  std::shared_ptr<void> handle_;
  const qc_arm_v1* arm_ = nullptr;
};

}  // namespace

std::unique_ptr<Arm> make_inproc_plugin_arm(std::string_view variant) {
  return std::make_unique<InprocPluginArm>(variant);
}

}  // namespace qc::plugin_detail
