// Operand capture: the operands every linear layer's arm received in a w8a8 or w8a8-fp8 model run, in the
// operand-file format `qconform predict/verify` read (see `capture_operands` in model.hpp).
#include <fmt/format.h>

#include <cstring>
#include <map>

#include "qconform/error.hpp"
#include "model/model.hpp"

namespace qc {

CaptureResult capture_operands(const Model& model, const W8a8Options& options,
                               const std::vector<std::vector<int32_t>>& prompts) {
  QC_INPUT(!prompts.empty(), "capture: expected at least one prompt, found none");
  struct Acc {
    LayerOperands first;  // weights, bias, shapes
    OperandStorage rows;  // a_q and a_scale of every prompt, concatenated
    std::vector<uint16_t> y;
    int64_t m = 0;
  };
  std::map<std::string, Acc> acc;
  W8a8Linear linear(options);
  linear.set_observer([&](const LayerOperands& ops, const ArmOutput& out) {
    Acc& a = acc[ops.name];
    if (a.m == 0) {
      a.first = ops;
    } else {
      QC_CHECK(a.first.n == ops.n && a.first.k == ops.k && a.first.w_q.data() == ops.w_q.data(),
               "capture: layer `{}` changed its weights between prompts", ops.name);
    }
    a.rows.a_q.insert(a.rows.a_q.end(), ops.a_q.begin(), ops.a_q.end());
    a.rows.a_scale.insert(a.rows.a_scale.end(), ops.a_scale.begin(), ops.a_scale.end());
    a.y.insert(a.y.end(), out.y.begin(), out.y.end());
    a.m += ops.m;
  });
  CaptureResult result;
  Decoder decoder(model, linear);
  std::vector<float> logits;
  for (const auto& p : prompts) {
    QC_INPUT(!p.empty(), "capture: a prompt with no tokens (expected at least BOS)");
    decoder.reset();
    decoder.forward(p, LogitRows::last, logits);
    result.rows_per_prompt.push_back(static_cast<int64_t>(p.size()));
  }
  for (const LinearLayer* l : model.linear_layers()) {
    auto it = acc.find(l->name);
    QC_CHECK(it != acc.end(), "capture: layer `{}` never ran", l->name);
    Acc& a = it->second;
    OperandStorage s = std::move(a.rows);
    s.w_q.assign(a.first.w_q.begin(), a.first.w_q.end());
    s.w_scale.assign(a.first.w_scale.begin(), a.first.w_scale.end());
    s.bias.assign(a.first.bias.begin(), a.first.bias.end());
    s.a_type = a.first.a_type;  // FP8 captures keep their element types (F8_E4M3 / F8_E5M2 tensors)
    s.w_type = a.first.w_type;
    s.a_scaling = a.first.a_scaling;  // and their scale layouts (the file's act_scale / weight_scale metadata)
    s.w_scaling = a.first.w_scaling;
    result.layers.push_back(make_operands(l->name, a.m, a.first.n, a.first.k, std::move(s),
                                          fmt::format("capture of {} ({} prompts)", model.source, prompts.size())));
    result.outputs.push_back(std::move(a.y));
  }
  result.record = linear.last_record();
  return result;
}

}  // namespace qc
