// The cuBLASLt FP8 arms against the models they claim, on issue #14's shapes (GPU machine):
//
//   qc_fp8_arm_check [--rows R] [--quick] [--seed S] [--arm LABEL]
//
// For each arm (cuda:cublaslt-fp8, cuda:cublaslt-fp8-fastacc), shape (M ∈ {1, 16, 512, 4096},
// N ∈ {1024, 4096}, K ∈ {256, 1024, 4096, 8192, 16384, 32768}; --quick: M ∈ {16, 512}, K ∈ {256,
// 4096, 16384}) and operand formats (e4m3 × e4m3, e5m2 × e4m3), with per-token activation and
// per-channel weight scales:
//   - `run`: an FP8 layer through the arm (scales applied by cuBLASLt's outer-vector scaling, or by
//     the fp32 GEMM plus the `fp8-scaled` epilogue where that is unavailable), bf16 out, against
//     the model the run's record claims, evaluated on the GPU (`fp8_model_evaluate_gpu`), then the
//     declared `fp8-scaled` epilogue on the host;
//   - `fp8_accumulate` (e4m3 × e4m3): the unscaled fp32 GEMM against the claimed model.
// The model is evaluated on the first R rows of A (default 512); every output of those rows is
// compared bit for bit. A run that claims no model is counted as refused (with the record's
// reason), never compared. Prints one line per (arm, shape, formats), then the totals; exits 0 when
// no compared output is off its claimed model, 1 otherwise, 77 (SKIPPED, with the reason) without
// a GPU.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "accum/fp8_model.hpp"
#include "arms/cuda/cuda.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"

namespace {

using qc::ElementType;
using qc::Fp8Format;

using qc::f32_bits;

// Codes of randn·2, round to nearest even, saturating (the operands of the H200 measurements).
std::vector<int8_t> randn_codes(std::mt19937_64& rng, int64_t count, Fp8Format f) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<int8_t> v(static_cast<size_t>(count));
  for (auto& c : v) {
    const float x = nd(rng);
    c = static_cast<int8_t>(f == Fp8Format::e4m3 ? qc::f32_to_e4m3fn(x, true) : qc::f32_to_e5m2(x, true));
  }
  return v;
}

struct Tally {
  int64_t compared = 0, off = 0, refused_runs = 0, claimed_runs = 0, split_runs = 0;
};

int run(int argc, char** argv) {
  int64_t rows = 512;
  bool quick = false;
  uint64_t seed = 1;
  std::vector<std::string> arms{"cuda:cublaslt-fp8", "cuda:cublaslt-fp8-fastacc"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc) {
      rows = std::stoll(argv[++i]);
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::stoull(argv[++i]);
    } else if (a == "--arm" && i + 1 < argc) {
      arms = {argv[++i]};
    } else {
      std::fprintf(stderr, "usage: qc_fp8_arm_check [--rows R] [--quick] [--seed S] [--arm LABEL]\n");
      return 2;
    }
  }
  std::string why;
  if (!qc::cuda_available(&why)) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return 77;
  }
  const std::vector<int64_t> ms = quick ? std::vector<int64_t>{16, 512} : std::vector<int64_t>{1, 16, 512, 4096};
  const std::vector<int64_t> ks =
      quick ? std::vector<int64_t>{256, 4096, 16384} : std::vector<int64_t>{256, 1024, 4096, 8192, 16384, 32768};
  std::mt19937_64 rng(seed);
  std::map<std::string, Tally> total;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& label : arms) {
    auto arm = qc::make_arm(label);
    for (const int64_t m : ms) {
      for (const int64_t n : {int64_t{1024}, int64_t{4096}}) {
        for (const int64_t k : ks) {
          for (const ElementType at : {ElementType::e4m3, ElementType::e5m2}) {
            const Fp8Format fa = at == ElementType::e4m3 ? Fp8Format::e4m3 : Fp8Format::e5m2;
            qc::OperandStorage st;
            st.a_q = randn_codes(rng, m * k, fa);
            st.w_q = randn_codes(rng, n * k, Fp8Format::e4m3);
            std::uniform_real_distribution<float> scale(0.01f, 2.0f);
            for (int64_t i = 0; i < m; ++i) st.a_scale.push_back(scale(rng));
            for (int64_t j = 0; j < n; ++j) st.w_scale.push_back(scale(rng));
            st.a_type = at;
            st.w_type = ElementType::e4m3;
            const qc::LayerOperands ops = qc::make_operands("check", m, n, k, std::move(st), "qc_fp8_arm_check");
            const int64_t r = std::min(rows, m);
            const auto a_codes = ops.a_codes();
            const auto w_codes = ops.w_codes();
            // (mode, claimed model, compared output, reference output) for run and, e4m3 only, accumulate.
            struct Check {
              std::string mode;
              nlohmann::json extra;
              std::vector<uint32_t> got;  // bf16 or fp32 bit patterns of the first r rows
            };
            std::vector<Check> checks;
            std::string kernel;
            try {
              const qc::ArmOutput out = arm->run(ops);
              kernel = out.record.kernel;
              checks.push_back({"run", out.record.extra, {out.y.begin(), out.y.begin() + r * n}});
            } catch (const qc::Error& e) {
              std::printf("%s M=%lld N=%lld K=%lld %s x e4m3 run: not run: %s\n", label.c_str(), (long long)m, (long long)n,
                          (long long)k, qc::element_type_name(at).data(), e.what());
              total[label].refused_runs++;
            }
            if (at == ElementType::e4m3) {
              nlohmann::json rec;
              const std::vector<float> d = arm->fp8_accumulate(reinterpret_cast<const uint8_t*>(a_codes.data()),
                                                               reinterpret_cast<const uint8_t*>(w_codes.data()), m,
                                                               n, k, rec);
              Check c{"accumulate", rec.value("extra", nlohmann::json::object()), {}};
              for (int64_t i = 0; i < r * n; ++i) c.got.push_back(f32_bits(d[static_cast<size_t>(i)]));
              checks.push_back(std::move(c));
            }
            for (const Check& c : checks) {
              Tally& t = total[label];
              const std::string line = fmt::format("{} M={} N={} K={} {} x e4m3 {}: splitK {} scheme {}", label, m, n,
                                                   k, qc::element_type_name(at), c.mode, c.extra.value("split_k", -1LL),
                                                   c.extra.value("reduction_scheme", -1LL));
              if (!c.extra.contains("accumulation_model") || c.extra["accumulation_model"].is_null()) {
                ++t.refused_runs;
                std::printf("%s: no model claimed (%s)\n", line.c_str(),
                            c.extra.value("accumulation_model_refused", std::string("no reason")).c_str());
                continue;
              }
              const std::string model = c.extra["accumulation_model"].get<std::string>();
              ++t.claimed_runs;
              if (model.find("-splitk-") != std::string::npos) ++t.split_runs;
              const std::vector<float> d = qc::fp8_model_evaluate_gpu(
                  qc::fp8_accumulation_model(model).model, a_codes.data(), fa, w_codes.data(), Fp8Format::e4m3,
                  {r, n, k});
              std::vector<uint32_t> want(static_cast<size_t>(r * n));
              if (c.mode == "run") {
                std::vector<uint16_t> y(want.size());
                qc::apply_epilogue(qc::fp8_epilogue(), d.data(), ops.a_scale.data(), ops.w_scale.data(), nullptr, r, n,
                                   y.data());
                want.assign(y.begin(), y.end());
              } else {
                for (size_t i = 0; i < want.size(); ++i) want[i] = f32_bits(d[i]);
              }
              int64_t off = 0;
              std::string first;
              for (size_t i = 0; i < want.size(); ++i) {
                if (want[i] == c.got[i]) continue;
                if (off++ < 3) {
                  first += fmt::format(" [{},{}] arm {:#x} model {:#x};", static_cast<int64_t>(i) / n,
                                       static_cast<int64_t>(i) % n, c.got[i], want[i]);
                }
              }
              t.compared += static_cast<int64_t>(want.size());
              t.off += off;
              std::printf("%s: claims %s, %lld of %zu outputs off%s\n", line.c_str(), model.c_str(), (long long)off,
                          want.size(), first.c_str());
            }
            std::fflush(stdout);
          }
        }
      }
    }
  }
  int64_t off = 0;
  for (const auto& [label, t] : total) {
    std::printf("TOTAL %s: %lld outputs compared, %lld off the claimed model; %lld runs claimed a model (%lld of them "
                "split-K), %lld claimed none\n",
                label.c_str(), (long long)t.compared, (long long)t.off, (long long)t.claimed_runs,
                (long long)t.split_runs, (long long)t.refused_runs);
    off += t.off;
  }
  std::printf("wall %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return off == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const qc::Error& e) {
    std::fprintf(stderr, "qc_fp8_arm_check: %s\n", e.what());
    return e.kind() == qc::ErrorKind::input ? 2 : 1;
  }
}
