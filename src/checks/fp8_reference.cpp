// verify's reference side of an FP8 pair (fp8_reference.hpp).
#include "checks/fp8_reference.hpp"

#include <algorithm>

#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace qc {

const std::vector<float>* Fp8LayerReference::model(const std::string& name) {
  std::lock_guard lock(mu);
  if (const auto it = d.find(name); it != d.end()) return &it->second;
  const NamedAccumModel named = fp8_accumulation_model(name);
  const auto t0 = std::chrono::steady_clock::now();
  const Fp8Gemm g = codes.gemm();
  std::vector<float> out;
  if (where == VerifyReference::gpu) {
    if (!gpu) gpu.emplace(g.a, g.a_format, g.w, g.w_format, g.s);  // the codes uploaded once for every model
    out = gpu->evaluate(named.model);
  } else {
    out.resize(static_cast<size_t>(g.s.m * g.s.n));
    fp8_model_evaluate(named.model, g, out.data(), threads);
  }
  seconds += seconds_since(t0);
  return &d.emplace(name, std::move(out)).first->second;
}

const std::vector<float>* Fp8LayerReference::block_model(const std::string& name, ScaleMode mode, const LayerOperands& scaled) {
  std::lock_guard lock(mu);
  const std::string key = fmt::format("{}@{}", name, scale_mode_name(mode));
  if (const auto it = d.find(key); it != d.end()) return &it->second;
  std::erase_if(d, [&](const auto& e) { return !e.first.ends_with(fmt::format("@{}", scale_mode_name(mode))); });
  const BlockModel model = fp8_block_model(name);
  const auto t0 = std::chrono::steady_clock::now();
  const Fp8BlockGemm g = fp8_block_gemm("verify (the block models' reference)", codes, scaled);
  validate_block_model_for(model, g, fmt::format("verify: model {}: layer `{}`", name, scaled.name));
  std::vector<float> out;
  if (where == VerifyReference::gpu) {
    const Fp8Gemm& c = g.codes;
    if (!gpu) gpu.emplace(c.a, c.a_format, c.w, c.w_format, c.s);  // the codes uploaded once for every model
    out = gpu->evaluate_block(model, g);
  } else {
    out.resize(static_cast<size_t>(g.codes.s.m * g.codes.s.n));
    fp8_block_evaluate(model, g, out.data(), threads);
  }
  seconds += seconds_since(t0);
  return &d.emplace(key, std::move(out)).first->second;
}

const std::vector<uint8_t>& Fp8LayerReference::chains_differ(const BlockModel& a, const BlockModel& b, const LayerOperands& rows) {
  std::lock_guard lock(mu);
  const std::string pair = a.chain.name + "|" + b.chain.name;
  if (chain_mask && chain_pair == pair) return *chain_mask;
  const auto t0 = std::chrono::steady_clock::now();
  const Fp8Gemm g = codes.gemm();
  const int64_t M = g.s.m, N = g.s.n, K = g.s.k, bk = rows.scale_block_k();
  std::vector<uint8_t> mask(static_cast<size_t>(M * N), 0);
  std::vector<uint8_t> ab, wb;
  std::vector<float> ca(mask.size()), cb(mask.size());
  for (int64_t k0 = 0; k0 < K; k0 += bk) {
    const int64_t len = std::min(bk, K - k0);
    ab.resize(static_cast<size_t>(M * len));
    wb.resize(static_cast<size_t>(N * len));
    for (int64_t i = 0; i < M; ++i) std::copy_n(g.a + i * K + k0, len, ab.data() + i * len);
    for (int64_t j = 0; j < N; ++j) std::copy_n(g.w + j * K + k0, len, wb.data() + j * len);
    const Fp8Gemm block{ab.data(), g.a_format, wb.data(), g.w_format, {M, N, len}};
    fp8_model_evaluate(a.chain.model, block, ca.data(), threads);
    fp8_model_evaluate(b.chain.model, block, cb.data(), threads);
    for (size_t i = 0; i < mask.size(); ++i) mask[i] |= f32_bits(ca[i]) != f32_bits(cb[i]);
  }
  seconds += seconds_since(t0);
  chain_mask = std::move(mask);
  chain_pair = pair;
  return *chain_mask;
}

void Fp8LayerReference::call_accumulator(int s, Arm& arm, const ArmInfo& info, const LayerOperands& rows) {
  if (info.accumulation_model.empty()) {
    acc_note[s] = "declares no accumulation model: no model to compare its accumulator with";
    return;
  }
  if (codes.a_format != Fp8Format::e4m3 || codes.w_format != Fp8Format::e4m3) {
    acc_note[s] = fmt::format("the fp32 accumulator interface takes e4m3 x e4m3 codes; layer `{}` is {}", rows.name,
                              codes.description);
    return;
  }
  nlohmann::json record;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    arm_acc[s] = arm.fp8_accumulate(codes.a.data(), codes.w.data(), rows.m, rows.n, rows.k, record, threads);
    acc_seconds[s] += seconds_since(t0);
  } catch (const Error& e) {
    acc_seconds[s] += seconds_since(t0);
    acc_note[s] = fmt::format("exposes no fp32 accumulator: {}", e.what());
    return;
  }
  QC_INPUT(static_cast<int64_t>(arm_acc[s].size()) == rows.m * rows.n,
           "arm {}: fp32 accumulator of {} elements for layer `{}`, expected {}x{}", info.label, arm_acc[s].size(),
           rows.name, rows.m, rows.n);
  // The call's record: a RunRecord (`extra` inside) or the CPU arms' flat object.
  const nlohmann::json& extra = record.contains("extra") ? record["extra"] : record;
  acc_model[s] = claimed_model(extra, info.accumulation_model);
  if (acc_model[s].empty()) {
    acc_note[s] = "the accumulator call's record refused the model: " + accumulation_model_refusal(extra);
    arm_acc[s].clear();
    return;
  }
  has_acc[s] = true;
}

std::shared_ptr<Fp8LayerReference> fp8_layer_reference(Arm* arms[2], const ArmInfo infos[2], const LayerOperands& rows,
                                                       VerifyReference where, int threads) {
  auto ref = std::make_shared<Fp8LayerReference>();
  ref->where = where;
  ref->threads = threads;
  ref->codes = fp8_layer_codes("verify (the accumulation models' reference)", rows);
  // Block pairs: the arms expose their D with each run (`ArmOutput::d`), and the models depend on the
  // scales, so everything is evaluated per run (`block_model`).
  if (infos[0].block()) return ref;
  std::vector<int> beside;
  for (int s = 0; s < 2; ++s) {
    ref->acc_beside[s] = infos[s].concurrent_calls;
    if (ref->acc_beside[s]) {
      beside.push_back(s);
    } else {
      ref->call_accumulator(s, *arms[s], infos[s], rows);
    }
  }
  if (!beside.empty()) {
    // B's call first: the run loop runs arm A next (an arm's own calls take turns).
    std::reverse(beside.begin(), beside.end());
    ref->accumulators = std::async(std::launch::async, [r = ref.get(), beside, arms = std::array{arms[0], arms[1]},
                                                        infos = std::array{infos[0], infos[1]}, rows] {
                          for (int s : beside) r->call_accumulator(s, *arms[s], infos[s], rows);
                        }).share();
  }
  if (where == VerifyReference::gpu) {
    // The declared models evaluated on the GPU while the arms run on the host's thread (a run or
    // accumulator call that claims another, such as a split-K form, has it evaluated by the element
    // pass that needs it). A failure here is not lost: the element pass that needs the model
    // evaluates it again and reports the error.
    std::vector<std::string> names;
    for (int s = 0; s < 2; ++s) {
      if (!infos[s].accumulation_model.empty() &&
          std::find(names.begin(), names.end(), infos[s].accumulation_model) == names.end()) {
        names.push_back(infos[s].accumulation_model);
      }
    }
    ref->prefetch = std::async(std::launch::async, [r = ref.get(), names] {
      for (const std::string& name : names) {
        try {
          r->model(name);
        } catch (const std::exception&) {  // evaluated (and reported) again where it is needed
        }
      }
    });
  }
  return ref;
}



// A block pair's run reference: each modelled arm's block model under this run's scales, each arm's
// exposed D with it, and under power-of-two scales C5's jurisdiction. There, every scale product is exact
// and every promotion form gives the same D, so the arms must agree bitwise wherever their chains agree
// in every K block; where the chains differ the models predict the difference. `key` marks the elements
// where they differ (D of A, and D of B made unequal there), and the return value counts the elements
// whose chains agree but whose models' D do not: a scale product left fp32's exact range (subnormal or
// overflowing), outside the probe's jurisdiction. `key_store` of `f` owns B's key.
int64_t block_run_reference(Fp8RunReference& f, Fp8LayerReference& ref, const LayerOperands& ops, ScaleMode mode,
                            const std::array<const ArmOutput*, 2>& out) {
  f.block = true;
  for (int s = 0; s < 2; ++s) {
    if (!f.modelled[s]) continue;
    f.d[s] = ref.block_model(f.model[s], mode, ops);
    if (out[s]->d) {
      QC_INPUT(static_cast<int64_t>(out[s]->d->size()) == ops.m * ops.n,
               "arm {} returned an fp32 accumulator of {} elements for layer `{}`, expected {}x{}", out[s]->record.arm,
               out[s]->d->size(), ops.name, ops.m, ops.n);
      f.arm_acc[s] = &*out[s]->d;
      f.acc_d[s] = f.d[s];
      f.acc_model[s] = f.model[s];
    }
  }
  if (mode == ScaleMode::real || !f.modelled[0] || !f.modelled[1]) return 0;
  // The chains each run claims (a claimed model is a block model of the same table).
  const BlockModel a = fp8_block_model(f.model[0]), b = fp8_block_model(f.model[1]);
  const std::vector<float>& da = *f.d[0];
  const std::vector<float>& db = *f.d[1];
  const bool same_chain = a.chain.name == b.chain.name;
  const std::vector<uint8_t>* differ = same_chain ? nullptr : &ref.chains_differ(a, b, ops);
  int64_t excluded = 0;
  if (differ != nullptr) {
    f.key_store = db;
    for (size_t i = 0; i < db.size(); ++i) {
      if ((*differ)[i]) {
        f.key_store[i] = f32_from_bits(f32_bits(da[i]) ^ 1u);  // unequal to A's: outside the required identity
      } else {
        excluded += f32_bits(da[i]) != f32_bits(db[i]);
      }
    }
    f.key[0] = &da;
    f.key[1] = &f.key_store;
  } else {
    for (size_t i = 0; i < db.size(); ++i) excluded += f32_bits(da[i]) != f32_bits(db[i]);
  }
  return excluded;
}

}  // namespace qc
