#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <thread>

#include "arms/backends.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/arm.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "core/name_table.hpp"
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

bool ArmInfo::block() const { return block_scaled || is_block_model_name(accumulation_model); }

constexpr NameRow<ArmKind> kArmKindNames[] = {
    {ArmKind::int8, "INT8"}, {ArmKind::fp8, "FP8"}, {ArmKind::fp8_block, "block-scaled FP8"}};

std::string_view arm_kind_name(ArmKind k) { return name_of(kArmKindNames, k); }

RunRecord Arm::run_resident(const ResidentOperands&, const ResidentOutputs&) {
  QC_FAIL("arm `{}` does not run on device-resident operands (ArmInfo::resident is false)",
                   printable_text(info().label));
}

RunRecord Arm::accumulate_resident(const ResidentOperands&, float*) {
  QC_FAIL("arm `{}` offers no unscaled FP8 GEMM on device-resident operands", printable_text(info().label));
}

std::vector<float> Arm::fp8_accumulate(const uint8_t*, const uint8_t*, int64_t, int64_t, int64_t, nlohmann::json&, int) {
  QC_FAIL_INPUT("arm `{}` offers no unscaled FP8 GEMM (it is not an FP8 arm, or an FP8 kernel with only its scaled entry); "
                "FP8 arms with one: {}",
                printable_text(info().label), fp8_arm_families(Fp8Families::unscaled));
}

void check_arm_takes_layer(const ArmInfo& info, const LayerOperands& ops) {
  const std::string layer = fmt::format("layer `{}` ({}x{}x{}, {} activations x {} weights, {} scales, from {})",
                                        printable_text(ops.name), ops.m, ops.n, ops.k, element_type_name(ops.a_type),
                                        element_type_name(ops.w_type), ops.scaling_description(),
                                        printable_text(ops.source));
  const std::string arm = printable_text(info.label);
  if (!info.fp8()) {
    QC_INPUT(!ops.fp8(),
             "arm `{}` is an INT8 arm (neither an FP8 element nor an FP8 accumulation model) and cannot run {}; FP8 "
             "layers run on the "
             "FP8 arms: {}",
             arm, layer, fp8_arm_families(Fp8Families::all));
    return;
  }
  const bool block_arm = info.block();
  QC_INPUT(block_arm || !ops.block_scaled(),
           "arm `{}` accumulates without scales (model {}; its epilogue applies one scale per row and per column "
           "afterwards) and cannot run {}: its per-K-block scales act inside the accumulation; block-scaled layers run "
           "on the block-scaled arms: {} (docs/accumulation.md, \"Block-scaled FP8\")",
           arm, info.accumulation_model.empty() ? std::string("undeclared") : info.accumulation_model, layer,
           fp8_arm_families(Fp8Families::block));
  if (!block_arm) return;
  QC_INPUT(ops.block_scaled(),
           "arm `{}` is a block-scaled FP8 arm (model {}) and cannot run {}: expected per-token-group or per-block "
           "scales (`synth --act-scale per-token-group:128 --weight-scale per-block:128x128`); unscaled FP8 layers run "
           "on {}",
           arm, info.accumulation_model.empty() ? std::string("undeclared") : info.accumulation_model, layer, fp8_arm_families(Fp8Families::unscaled));
  QC_INPUT(info.block_k == 0 || ops.scale_block_k() == info.block_k,
           "arm `{}` takes K blocks of {} products and cannot run {}: its scales cut K into blocks of {}", arm,
           info.block_k, layer, ops.scale_block_k());
  const int64_t rows = ops.w_scaling.granularity == ScaleGranularity::per_block ? ops.w_scaling.block_rows : 1;
  QC_INPUT(info.block_n == 0 || rows == info.block_n,
           "arm `{}` takes weight scales per block of {} rows and cannot run {}: its weight scales cover {} row(s) "
           "each",
           arm, info.block_n, layer, rows);
}

namespace {
// Every arm `make_arm` creates (cpu, onednn, mutant, cuda, plugin, and the declared arms wrapping them)
// runs behind this guard, so that a layer an arm cannot take (an FP8 layer on an INT8 arm, a block-scaled
// layer on an arm that would ignore its scales, and the reverse) is refused in one place before any
// kernel reinterprets its bytes.
class LayerGuard final : public Arm {
 public:
  explicit LayerGuard(std::unique_ptr<Arm> arm) : arm_(std::move(arm)), info_(arm_->info()) {}
  ArmInfo info() const override { return arm_->info(); }
  ArmOutput run(const LayerOperands& ops) override {
    check_arm_takes_layer(info_, ops);
    return arm_->run(ops);
  }
  RunRecord run_resident(const ResidentOperands& ops, const ResidentOutputs& out) override {
    check_arm_takes_layer(info_, *ops.host);
    return arm_->run_resident(ops, out);
  }
  RunRecord accumulate_resident(const ResidentOperands& ops, float* d) override { return arm_->accumulate_resident(ops, d); }
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    return arm_->fp8_accumulate(a, w, m, n, k, record, threads);
  }

 private:
  std::unique_ptr<Arm> arm_;
  ArmInfo info_;  // what the arm declared when it was made (the check's input; `info()` stays the arm's own)
};

std::unique_ptr<Arm> guarded(std::unique_ptr<Arm> arm) {
  if (!arm) return arm;
  return std::make_unique<LayerGuard>(std::move(arm));
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

std::string fp8_arm_families(Fp8Families which) {
  std::string list;
  for (const ArmBackend& b : arm_backends()) {
    for (const Fp8ArmFamily& f : b.fp8_families) {
      if ((which == Fp8Families::unscaled && f.block_scaled) || (which == Fp8Families::block && !f.block_scaled)) continue;
      list += (list.empty() ? "" : ", ") + f.label;
      if (which == Fp8Families::all && f.block_scaled) list += " (block-scaled)";
    }
  }
  return list;
}

std::optional<ArmLabel> parse_arm_label(std::string_view label) {
  const auto colon = label.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  return ArmLabel{label.substr(0, colon), label.substr(colon + 1)};
}

std::string arm_file_of(std::string_view label) {
  const std::optional<ArmLabel> parts = parse_arm_label(label);
  if (!parts) return "";
  for (const ArmBackend& b : arm_backends()) {
    if (b.prefix == parts->backend) return b.variant_is_file ? std::string(parts->variant) : std::string();
  }
  return "";
}

std::unique_ptr<Arm> make_arm(std::string_view label) {
  // Labels come from the command line and from files: every message shows them escaped.
  const std::string shown = printable_text(label);
  const std::optional<ArmLabel> parts = parse_arm_label(label);
  QC_INPUT(parts.has_value(), "arm `{}`: expected `backend:variant` (e.g. cpu:vllm-cutlass){}; known arms: {}", shown,
           did_you_mean(label, list_arms()), fmt::join(list_arms(), ", "));
  const std::string_view prefix = parts->backend;
  const std::string_view variant = parts->variant;
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
