// Test arms built on a real one. `WrappedArm` forwards every call to the arm `inner` names, under
// the label `label` where one is given; a test overrides only what its arm changes. `DeclaringArm`
// runs `inner` under another label and declares (and has each run record claim) the accumulation
// model `declares`: a black box whose claim the check under test must see through.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qconform/arm.hpp"

namespace qc::test {

class WrappedArm : public Arm {
 public:
  explicit WrappedArm(const std::string& inner, std::string label = "")
      : inner_(make_arm(inner)), label_(std::move(label)) {}
  ArmInfo info() const override {
    ArmInfo i = inner_->info();
    if (!label_.empty()) i.label = label_;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override { return inner_->run(ops); }
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    return inner_->fp8_accumulate(a, w, m, n, k, record, threads);
  }

 private:
  std::unique_ptr<Arm> inner_;
  std::string label_;
};

class DeclaringArm : public WrappedArm {
 public:
  // `unscaled` false: no unscaled entry (`fp8_accumulate` is the default's input error, as a kernel
  // with only its scaled entry refuses it).
  DeclaringArm(const std::string& inner, std::string label, std::string declares, bool unscaled)
      : WrappedArm(inner, std::move(label)), declares_(std::move(declares)), unscaled_(unscaled) {}
  ArmInfo info() const override {
    ArmInfo i = WrappedArm::info();
    i.accumulation_model = declares_;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    ArmOutput out = WrappedArm::run(ops);
    out.record.arm = info().label;
    out.record.extra["accumulation_model"] = declares_;
    return out;
  }
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    if (!unscaled_) return Arm::fp8_accumulate(a, w, m, n, k, record, threads);
    return WrappedArm::fp8_accumulate(a, w, m, n, k, record, threads);
  }

 private:
  std::string declares_;
  bool unscaled_;
};

}  // namespace qc::test
