#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <thread>

#include "arms/backends.hpp"
#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/suggest.hpp"

namespace qc {

namespace {
std::vector<ArmBackend>& backend_storage() {
  static std::vector<ArmBackend> backends;
  return backends;
}
std::once_flag builtin_once;
void ensure_builtins() { std::call_once(builtin_once, [] { detail::register_builtin_arm_backends(); }); }
}  // namespace

void to_json(nlohmann::json& j, const RunRecord& r) {
  j = {{"arm", r.arm},         {"kernel", r.kernel},   {"epilogue", r.epilogue}, {"device", r.device},
       {"library", r.library}, {"build", r.build},     {"extra", r.extra}};
}

void from_json(const nlohmann::json& j, RunRecord& r) {
  r.arm = j.at("arm").get<std::string>();
  r.kernel = j.at("kernel").get<std::string>();
  r.epilogue = j.value("epilogue", "");
  r.device = j.value("device", "");
  r.library = j.value("library", "");
  r.build = j.value("build", "");
  r.extra = j.value("extra", nlohmann::json::object());
}

std::vector<float> Arm::fp8_accumulate(const uint8_t*, const uint8_t*, int64_t, int64_t, int64_t, nlohmann::json&, int) {
  QC_FAIL_INPUT("arm `{}` offers no unscaled FP8 GEMM (it is not an FP8 arm, or an FP8 kernel with only its scaled entry); "
                "FP8 arms with one: cpu:fp8-<model>, "
                "cuda:cublaslt-fp8, cuda:cublaslt-fp8-fastacc",
                printable_text(info().label));
}

void check_arm_takes_layer(const ArmInfo& info, const LayerOperands& ops) {
  if (!ops.fp8() || info.fp8()) return;
  QC_FAIL_INPUT("arm `{}` is an INT8 arm (neither an FP8 element nor an FP8 accumulation model) and cannot run layer `{}` "
                "({}x{}x{}, {} activations x {} weights, from {}); FP8 layers run on the FP8 arms: cpu:fp8-<model>, "
                "cuda:cublaslt-fp8, cuda:cublaslt-fp8-fastacc",
                printable_text(info.label), printable_text(ops.name), ops.m, ops.n, ops.k,
                element_type_name(ops.a_type), element_type_name(ops.w_type), printable_text(ops.source));
}

namespace {
// Every INT8 arm `make_arm` creates (cpu, onednn, mutant, cuda mma/cublaslt-int8, plugin, and the
// declared arms wrapping them) runs behind this guard, so that an FP8 layer is refused in one place
// before any kernel reinterprets its FP8 bit patterns as int8 codes.
class Int8LayerGuard final : public Arm {
 public:
  explicit Int8LayerGuard(std::unique_ptr<Arm> arm) : arm_(std::move(arm)) {}
  ArmInfo info() const override { return arm_->info(); }
  ArmOutput run(const LayerOperands& ops) override {
    check_arm_takes_layer(arm_->info(), ops);
    return arm_->run(ops);
  }

 private:
  std::unique_ptr<Arm> arm_;
};

std::unique_ptr<Arm> guarded(std::unique_ptr<Arm> arm) {
  if (!arm || arm->info().fp8()) return arm;  // FP8 arms take FP8 and INT8 layers
  return std::make_unique<Int8LayerGuard>(std::move(arm));
}
}  // namespace

void register_arm_backend(ArmBackend backend) {
  for (const ArmBackend& b : backend_storage()) {
    QC_CHECK(b.prefix != backend.prefix, "arm backend `{}` registered twice", backend.prefix);
  }
  backend_storage().push_back(std::move(backend));
}

const std::vector<ArmBackend>& arm_backends() {
  ensure_builtins();
  return backend_storage();
}

std::vector<std::string> list_arms() {
  std::vector<std::string> labels;
  for (const ArmBackend& b : arm_backends()) {
    for (const std::string& v : b.variants()) labels.push_back(fmt::format("{}:{}", b.prefix, v));
  }
  return labels;
}

std::unique_ptr<Arm> make_arm(std::string_view label) {
  // Labels come from the command line and from files: every message shows them escaped.
  const std::string shown = printable_text(label);
  const auto colon = label.find(':');
  QC_INPUT(colon != std::string_view::npos && colon > 0,
           "arm `{}`: expected `backend:variant` (e.g. cpu:vllm-cutlass){}; known arms: {}", shown,
           did_you_mean(label, list_arms()), fmt::join(list_arms(), ", "));
  const std::string_view prefix = label.substr(0, colon);
  const std::string_view variant = label.substr(colon + 1);
  for (const ArmBackend& b : arm_backends()) {
    if (b.prefix != prefix) continue;
    try {
      return guarded(b.make(variant));
    } catch (const Error& e) {
      // A backend's refusal ("unknown epilogue `x`") names the variant; say which arm asked for it,
      // and which listed arms are near a label that is none of them (a typo).
      if (e.kind() != ErrorKind::input) throw;
      const std::vector<std::string> known = list_arms();
      const std::string hint =
          std::find(known.begin(), known.end(), label) == known.end() ? did_you_mean(label, known) : std::string();
      if (std::string_view(e.what()).find(shown) != std::string_view::npos) {
        if (hint.empty()) throw;
        throw Error(ErrorKind::input, std::string(e.what()) + hint, e.file(), e.line(), e.condition());
      }
      // `e.what()` is qconform's own message, its names already escaped: not escaped twice.
      throw Error(ErrorKind::input, fmt::format("arm `{}`: {}{}", shown, e.what(), hint), e.file(), e.line(),
                  e.condition());
    }
  }
  for (const AbsentBackend& a : absent_arm_backends()) {
    QC_INPUT(a.prefix != prefix, "arm `{}`: the `{}` backend is absent from this build: {}", shown,
             printable_text(prefix), a.reason);
  }
  std::vector<std::string> prefixes;
  for (const ArmBackend& b : arm_backends()) prefixes.push_back(b.prefix);
  std::string hint = did_you_mean(label, list_arms());
  if (hint.empty()) hint = did_you_mean(prefix, prefixes);
  QC_FAIL_INPUT("arm `{}`: unknown backend `{}`; expected one of: {}{}", shown, printable_text(prefix),
                fmt::join(prefixes, ", "), printable_text(hint));
}

std::string cpu_description() {
  static const std::string description = [] {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line, model = "unknown CPU", flags;
    while (std::getline(cpuinfo, line)) {
      if (model == "unknown CPU" && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
      if (flags.empty() && line.rfind("flags", 0) == 0) flags = " " + line.substr(line.find(':') + 1) + " ";
    }
    std::vector<std::string> isa;
    for (const char* f : {"avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_int8"}) {
      if (flags.find(fmt::format(" {} ", f)) != std::string::npos) isa.emplace_back(f);
    }
    return fmt::format("cpu: {} ({}; {} threads)", model, fmt::join(isa, ","), std::thread::hardware_concurrency());
  }();
  return description;
}

}  // namespace qc
