#include "arms/declared_arm.hpp"

#include <fmt/format.h>

#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"

namespace qc {

namespace {

class DeclaredArm final : public Arm {
 public:
  DeclaredArm(std::unique_ptr<Arm> arm, std::string epilogue, std::string provenance)
      : arm_(std::move(arm)), epilogue_(std::move(epilogue)), provenance_(std::move(provenance)) {}

  ArmInfo info() const override {
    ArmInfo i = arm_->info();
    i.description += fmt::format(" [epilogue {}: {}]", provenance_, epilogue_);
    i.epilogue = epilogue_;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    ArmOutput out = arm_->run(ops);
    out.record.epilogue = epilogue_;
    return out;
  }
  // An FP8 arm keeps its accumulation model and its fp32 accumulator (verify compares it with the model).
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    return arm_->fp8_accumulate(a, w, m, n, k, record, threads);
  }

 private:
  std::unique_ptr<Arm> arm_;
  std::string epilogue_;
  std::string provenance_;
};

}  // namespace

std::unique_ptr<Arm> declare_epilogue(std::unique_ptr<Arm> arm, const std::string& formula, const std::string& what,
                                      const std::string& provenance) {
  std::string name;
  try {
    name = std::string(epilogue(formula).name);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::input) throw;
    QC_FAIL_INPUT("{}: {}", what, e.what());
  }
  return std::make_unique<DeclaredArm>(std::move(arm), std::move(name), provenance);
}

}  // namespace qc
