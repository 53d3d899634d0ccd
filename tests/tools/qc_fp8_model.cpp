// Test tool for tests/peer/test_accumulation_peer.py and scripts/fp8-model-check.py: evaluates
// FP8 accumulation models (src/accum/fp8_model.hpp).
//
//   qc_fp8_model --names                 the named models, one a line
//   qc_fp8_model < cases                 one case a line: `model fa fw K a_hex w_hex` (fa, fw
//                                        e4m3|e5m2; a_hex, w_hex 2·K hex digits of the codes);
//                                        prints `ref fast` (fp32 bits, 8 hex digits each), or
//                                        `error <message>` for an input error
//   qc_fp8_model npy MODEL FA FW A.npy W.npy OUT.npy [cpu|gpu]
//                                        A [M,K], W [N,K] uint8 codes (any 1-byte dtype); writes
//                                        OUT [M,N] float32 (cpu: the fast evaluation, gpu: the
//                                        CUDA kernel); prints the path used
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "accum/fp8_model.hpp"
#include "arms/cuda/cuda.hpp"
#include "core/npy.hpp"
#include "qconform/error.hpp"

namespace {

qc::Fp8Format format(const std::string& s) {
  QC_INPUT(s == "e4m3" || s == "e5m2", "format: expected e4m3 or e5m2, found `{}`", s);
  return s == "e4m3" ? qc::Fp8Format::e4m3 : qc::Fp8Format::e5m2;
}

std::vector<uint8_t> hex_codes(const std::string& h) {
  std::vector<uint8_t> v(h.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(std::stoul(h.substr(2 * i, 2), nullptr, 16));
  return v;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

int npy_mode(int argc, char** argv) {
  QC_INPUT(argc >= 8, "usage: qc_fp8_model npy MODEL FA FW A.npy W.npy OUT.npy [cpu|gpu]");
  const qc::NamedAccumModel m = qc::fp8_accumulation_model(argv[2]);
  const qc::Fp8Format fa = format(argv[3]), fw = format(argv[4]);
  const qc::Tensor a = qc::read_npy(argv[5], qc::DType::u8);
  const qc::Tensor w = qc::read_npy(argv[6], qc::DType::u8);
  QC_INPUT(a.ndim() == 2 && w.ndim() == 2 && a.shape()[1] == w.shape()[1],
           "expected A [M,K] and W [N,K], found {} and {}", qc::shape_string(a.shape()), qc::shape_string(w.shape()));
  const qc::AccumShape s{a.shape()[0], w.shape()[0], a.shape()[1]};
  const auto* ap = reinterpret_cast<const uint8_t*>(a.bytes().data());
  const auto* wp = reinterpret_cast<const uint8_t*>(w.bytes().data());
  const std::string where = argc > 8 ? argv[8] : "cpu";
  QC_INPUT(where == "cpu" || where == "gpu", "expected cpu or gpu, found `{}`", where);
  qc::Tensor out = qc::Tensor::empty(qc::DType::f32, {s.m, s.n});
  std::string path;
  if (where == "gpu") {
    const std::vector<float> d = qc::fp8_model_evaluate_gpu(m.model, ap, fa, wp, fw, s, &path);
    std::memcpy(out.data<float>(), d.data(), d.size() * sizeof(float));
  } else {
    const qc::Fp8Gemm g{ap, fa, wp, fw, s};
    path = qc::fast_path_name(qc::fp8_fast_path(m.model, g));
    qc::fp8_model_evaluate(m.model, g, out.data<float>());
  }
  qc::write_npy(argv[7], out);
  std::printf("%s: %s, M=%lld N=%lld K=%lld\n", m.name.c_str(), path.c_str(), static_cast<long long>(s.m),
              static_cast<long long>(s.n), static_cast<long long>(s.k));
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc > 1 && std::strcmp(argv[1], "--names") == 0) {
    for (const auto& r : qc::fp8_accumulation_models()) std::printf("%s\n", r.name.c_str());
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "npy") == 0) return npy_mode(argc, argv);
  std::string model, fa, fw, ah, wh;
  long long k = 0;
  while (std::cin >> model >> fa >> fw >> k >> ah >> wh) {
    try {
      const qc::NamedAccumModel m = qc::fp8_accumulation_model(model);
      const std::vector<uint8_t> a = hex_codes(ah), w = hex_codes(wh);
      QC_INPUT(static_cast<long long>(a.size()) == k && static_cast<long long>(w.size()) == k,
               "expected {} codes per operand, found {} and {}", k, a.size(), w.size());
      const qc::Fp8Gemm g{a.data(), format(fa), w.data(), format(fw), {1, 1, k}};
      float ref = 0, fast = 0;
      qc::fp8_model_reference(m.model, g, &ref);
      qc::fp8_model_evaluate(m.model, g, &fast, 1);
      std::printf("%08x %08x\n", bits(ref), bits(fast));
    } catch (const qc::Error& e) {
      std::string msg = e.what();
      for (char& c : msg) c = c == '\n' ? ' ' : c;
      std::printf("error %s\n", msg.c_str());
    }
  }
  return 0;
} catch (const qc::Error& e) {
  std::fprintf(stderr, "qc_fp8_model: %s\n", e.what());
  return 2;
}
