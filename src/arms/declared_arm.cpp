#include "arms/declared_arm.hpp"

#include <fmt/format.h>

#include "accum/fp8_model.hpp"
#include "epilogue/block_models.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

class DeclaredArm final : public Arm {
 public:
  DeclaredArm(std::unique_ptr<Arm> arm, std::string epilogue, std::string model, std::string provenance)
      : arm_(std::move(arm)), epilogue_(std::move(epilogue)), model_(std::move(model)), provenance_(std::move(provenance)) {}

  ArmInfo info() const override {
    ArmInfo i = arm_->info();
    if (model_.empty()) {
      i.description += fmt::format(" [epilogue {}: {}]", provenance_, epilogue_);
    } else {
      i.description += epilogue_.empty() ? fmt::format(" [block model {}: {}]", provenance_, model_)
                                         : fmt::format(" [accumulation model and epilogue {}: {}; {}]", provenance_, model_, epilogue_);
      i.accumulation_model = model_;
    }
    i.epilogue = epilogue_;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    ArmOutput out = arm_->run(ops);
    out.record.epilogue = epilogue_;
    claim(out.record.extra);
    return out;
  }
  RunRecord run_resident(const ResidentOperands& ops, const ResidentOutputs& out) override {
    RunRecord record = arm_->run_resident(ops, out);
    record.epilogue = epilogue_;
    claim(record.extra);
    return record;
  }
  RunRecord accumulate_resident(const ResidentOperands& ops, float* d) override {
    RunRecord record = arm_->accumulate_resident(ops, d);
    claim(record.extra);
    return record;
  }
  // An FP8 arm keeps its fp32 accumulator (verify compares it with the model).
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    std::vector<float> d = arm_->fp8_accumulate(a, w, m, n, k, record, threads);
    claim(record.contains("extra") ? record["extra"] : record);
    return d;
  }

 private:
  // A declared model is what a record claims when the arm's own record claims none.
  void claim(nlohmann::json& extra) const {
    if (model_.empty()) return;
    if (!extra.is_object()) extra = nlohmann::json::object();
    if (epilogue_.empty() && extra.contains("accumulation_model") && extra["accumulation_model"] != model_) {
      // A block model given from outside replaces the arm's own static claim (what it was made with),
      // which the record keeps beside it; a run that refuses a model (a null claim) is left as it is.
      if (extra["accumulation_model"].is_null()) return;
      extra["accumulation_model_of_the_arm"] = extra["accumulation_model"];
      extra.erase("accumulation_model");
    }
    if (extra.contains("accumulation_model")) return;
    extra["accumulation_model"] = model_;
    extra["accumulation_model_declared_by"] = provenance_;
  }

  std::unique_ptr<Arm> arm_;
  std::string epilogue_, model_;
  std::string provenance_;
};

}  // namespace

std::unique_ptr<Arm> declare_epilogue(std::unique_ptr<Arm> arm, const std::string& formula, const std::string& what,
                                      const std::string& provenance) {
  std::string name, model;
  const size_t semi = formula.find(';');
  const ArmInfo info = arm->info();
  try {
    if (semi == std::string::npos && is_block_model_name(formula)) {
      // A block model (`block-<form>[+<chain>]`, what identify names for a block-scaled arm): the scales
      // and the bf16 rounding are the model's; no epilogue.
      QC_INPUT(info.block(),
               "`{}` is a block model, but arm `{}` is not a block-scaled FP8 arm (it declares `{}`)", formula,
               info.label, info.accumulation_model);
      (void)fp8_block_model(formula);  // unknown forms and chains: the input error listing them
      return std::make_unique<DeclaredArm>(std::move(arm), "", formula, provenance);
    }
    if (semi != std::string::npos) {
      // `<model>; <epilogue>`: an FP8 arm's accumulation model and epilogue.
      QC_INPUT(info.fp8(), "`{}` declares an accumulation model (`<model>; <epilogue>`), but arm `{}` is an INT8 arm",
               formula, info.label);
      const auto trim = [](std::string s) {
        while (!s.empty() && s.front() == ' ') s.erase(s.begin());
        while (!s.empty() && s.back() == ' ') s.pop_back();
        return s;
      };
      model = trim(formula.substr(0, semi));
      (void)fp8_accumulation_model(model);  // unknown names and bad spellings: the input error listing them
      name = trim(formula.substr(semi + 1));
    } else {
      name = formula;
    }
    const Epilogue& e = epilogue(name);
    name = std::string(e.name);
    if (info.fp8()) {
      QC_INPUT(e.name == fp8_epilogue().name || (e.kind == EpilogueKind::point && e.space.input == FormulaInput::fp32),
               "arm `{}` is an FP8 arm: its epilogue is a formula over the fp32 GEMM result d (e.g. `bf16(rn32(rn32(d * "
               "sa) * sw))`) or `fp8-scaled`, found `{}`",
               info.label, name);
    } else {
      QC_INPUT(!(e.kind == EpilogueKind::point && e.space.input == FormulaInput::fp32) && e.name != fp8_epilogue().name,
               "arm `{}` is an INT8 arm: its epilogue is a formula over the integer accumulator acc, found `{}`",
               info.label, name);
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::input) throw;
    QC_FAIL_INPUT("{}: {}", what, e.what());
  }
  return std::make_unique<DeclaredArm>(std::move(arm), std::move(name), std::move(model), provenance);
}

}  // namespace qc
