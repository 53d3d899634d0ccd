// `plugin:<path.so>`: loads an arm from a shared library through the versioned C ABI of
// `include/qconform/arm_abi.h`. Everything the library declares is validated before its `run`
// is ever called, and every failure is a QC_INPUT error naming the .so path and the field.
#include "arms/plugin/plugin_arm.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <system_error>

#include "qconform/arm.hpp"
#include "qconform/arm_abi.h"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/sha256.hpp"
#include "qconform/version.hpp"

namespace qc {

namespace {

// The bf16 pattern `y` is filled with before `run`: a quiet NaN, so an element the plugin
// forgets to write fails every check instead of passing as a plausible zero.
constexpr uint16_t kUnwrittenBf16 = 0x7FC1;
constexpr size_t kErrorBufferSize = 4096;

std::string dl_error_text() {
  const char* e = dlerror();
  return e ? e : "(no dlerror message)";
}

// One loaded library: the validated descriptor plus the handle that keeps it mapped.
struct LoadedPlugin {
  std::string path;    // canonical path of the file that was hashed and loaded
  std::string sha256;  // "sha256:<hex>" of that file
  std::shared_ptr<void> handle;
  const qc_arm_v1* arm = nullptr;
  std::string name;
  std::string epilogue;  // "" when the plugin declares none
};

LoadedPlugin load_plugin(std::string_view given) {
  QC_INPUT(!given.empty(), "arm `plugin:`: expected a path to a shared library, e.g. plugin:./libmyarm.so");
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p{std::string(given)};
  QC_INPUT(fs::is_regular_file(p, ec), "arm `plugin:{}`: file `{}` not found (expected an existing shared library; "
           "the library search path is not used)", given, given);
  LoadedPlugin lp;
  lp.path = fs::canonical(p, ec).string();
  QC_INPUT(!ec, "arm `plugin:{}`: cannot resolve `{}`: {}", given, given, ec.message());
  // Hashed before loading: the digest identifies the bytes dlopen() maps next.
  lp.sha256 = sha256_file(lp.path);

  dlerror();
  void* raw = dlopen(lp.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  QC_INPUT(raw != nullptr, "plugin `{}`: dlopen failed: {}", lp.path, dl_error_text());
  lp.handle = std::shared_ptr<void>(raw, [](void* h) { dlclose(h); });

  dlerror();
  void* sym = dlsym(raw, QC_ARM_V1_ENTRY_SYMBOL);
  QC_INPUT(sym != nullptr, "plugin `{}`: symbol `{}` not found (a qconform arm plugin exports `const qc_arm_v1* "
           "{}(void)`, see include/qconform/arm_abi.h): {}", lp.path, QC_ARM_V1_ENTRY_SYMBOL, QC_ARM_V1_ENTRY_SYMBOL,
           dl_error_text());
  const auto entry = reinterpret_cast<qc_arm_v1_entry_fn>(sym);
  const qc_arm_v1* arm = entry();
  QC_INPUT(arm != nullptr, "plugin `{}`: `{}()` returned NULL; expected a pointer to a qc_arm_v1", lp.path,
           QC_ARM_V1_ENTRY_SYMBOL);
  // `abi_version` and `struct_size` lead every version of the struct, so reading them is safe
  // before anything else is known.
  QC_INPUT(arm->abi_version == QC_ARM_ABI_VERSION,
           "plugin `{}`: field `abi_version`: expected {} (QC_ARM_ABI_VERSION of this qconform), found {}", lp.path,
           QC_ARM_ABI_VERSION, arm->abi_version);
  QC_INPUT(arm->struct_size >= sizeof(qc_arm_v1),
           "plugin `{}`: field `struct_size`: expected >= {} (sizeof(qc_arm_v1)), found {}", lp.path,
           sizeof(qc_arm_v1), arm->struct_size);
  QC_INPUT(arm->name != nullptr && arm->name[0] != '\0',
           "plugin `{}`: field `name`: expected a non-empty kernel identity string, found {}", lp.path,
           arm->name ? "\"\"" : "NULL");
  QC_INPUT(arm->run != nullptr, "plugin `{}`: field `run`: expected a function pointer, found NULL", lp.path);
  QC_INPUT((arm->flags & ~uint64_t{QC_ARM_FLAG_WRITES_ACC}) == 0,
           "plugin `{}`: field `flags`: expected only QC_ARM_FLAG_* bits (0x{:x}), found 0x{:x}", lp.path,
           QC_ARM_FLAG_WRITES_ACC, arm->flags);
  lp.arm = arm;
  lp.name = arm->name;
  if (arm->epilogue != nullptr) {
    lp.epilogue = arm->epilogue;
    try {
      (void)qc::epilogue(lp.epilogue);
    } catch (const Error& e) {
      QC_FAIL_INPUT("plugin `{}`: field `epilogue`: {}", lp.path, e.what());
    }
  }
  return lp;
}

class PluginArm final : public Arm {
 public:
  PluginArm(std::string label, LoadedPlugin plugin) : label_(std::move(label)), plugin_(std::move(plugin)) {}

  ArmInfo info() const override {
    ArmInfo i;
    i.label = label_;
    i.description = fmt::format("plugin `{}` ({}), kernel `{}`", plugin_.path, plugin_.sha256, plugin_.name);
    i.epilogue = plugin_.epilogue;
    i.exposes_accumulator = (plugin_.arm->flags & QC_ARM_FLAG_WRITES_ACC) != 0;
    return i;
  }

  ArmOutput run(const LayerOperands& ops) override {
    ops.validate();
    const size_t count = static_cast<size_t>(ops.m * ops.n);
    ArmOutput out;
    out.y.assign(count, kUnwrittenBf16);
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
    args.y = out.y.data();
    args.acc = acc.data();
    args.acc_written = &acc_written;
    args.error = error.data();
    args.error_size = error.size();

    const int rc = plugin_.arm->run(plugin_.arm->ctx, &args);
    error.back() = '\0';  // a plugin that overran nothing but forgot the terminator still yields a string
    if (rc != 0) {
      const std::string message = error[0] != '\0' ? std::string(error.data()) : "(the plugin wrote no message)";
      QC_FAIL_INPUT("plugin `{}` (kernel `{}`): run failed with code {} on layer `{}` (m={} n={} k={}): {}",
                    plugin_.path, plugin_.name, rc, ops.name, ops.m, ops.n, ops.k, message);
    }
    const bool declares_acc = (plugin_.arm->flags & QC_ARM_FLAG_WRITES_ACC) != 0;
    QC_INPUT(!declares_acc || acc_written != 0,
             "plugin `{}` (kernel `{}`): field `flags` declares QC_ARM_FLAG_WRITES_ACC, but run left "
             "`*acc_written` at 0 on layer `{}`", plugin_.path, plugin_.name, ops.name);
    if (acc_written != 0) out.acc = std::move(acc);

    out.record.arm = label_;
    out.record.kernel = plugin_.name;
    out.record.epilogue = plugin_.epilogue;
    out.record.device = cpu_description();
    out.record.library = fmt::format("plugin {} {}", plugin_.path, plugin_.sha256);
    out.record.build = build_flags();
    out.record.extra = {{"plugin_path", plugin_.path},
                        {"plugin_sha256", plugin_.sha256},
                        {"abi_version", plugin_.arm->abi_version},
                        {"flags", plugin_.arm->flags}};
    return out;
  }

 private:
  std::string label_;
  LoadedPlugin plugin_;
};

}  // namespace

void register_plugin_arms() {
  register_arm_backend(ArmBackend{
      .prefix = "plugin",
      .help = "an arm loaded from a shared library through the C ABI of include/qconform/arm_abi.h: "
              "plugin:<path.so> (see docs/plugins.md)",
      .variants = [] { return std::vector<std::string>{}; },
      .make = [](std::string_view variant) -> std::unique_ptr<Arm> {
        return std::make_unique<PluginArm>(fmt::format("plugin:{}", variant), load_plugin(variant));
      },
  });
}

}  // namespace qc
