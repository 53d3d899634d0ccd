// Test tool for tests/peer/test_fp8_quantize_peer.py: runs the FP8 quantizers of
// src/epilogue/quantize.hpp on .npy files.
//
//   qc_quantize act FMT SCALING X.npy Q.npy S.npy
//       FMT e4m3|e5m2, SCALING per-token|per-tensor; X [M,K] float32. Writes Q [M,K] uint8 (the
//       codes) and S [M] float32 (`quantize_activations_fp8`).
//   qc_quantize weight FMT SCALING DTYPE W.npy Q.npy S.npy
//       SCALING per-channel|per-tensor, DTYPE f32|bf16; W [N,K] float32. Writes Q [N,K] uint8 and
//       S [N] float32 (`quantize_weights_fp8`).
//   qc_quantize group QUANTIZER UE8M0 G X.npy Q.npy S.npy
//       QUANTIZER vllm|sglang|deepgemm, UE8M0 0|1, G the group size; X [M,K] float32. Writes Q [M,K]
//       uint8 (e4m3 codes) and S [M, ceil(K/G)] float32 (`quantize_activations_fp8_groups`).
//   qc_quantize block QUANTIZER UE8M0 BN BK DTYPE W.npy Q.npy S.npy
//       QUANTIZER deepgemm|compressed-tensors; W [N,K] float32. Writes Q [N,K] uint8 and
//       S [ceil(N/BN), ceil(K/BK)] float32 (`quantize_weights_fp8_blocks`).
// An input error prints `qc_quantize: <message>` on stderr and exits 2.
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/npy.hpp"
#include "epilogue/quantize.hpp"
#include "qconform/error.hpp"

namespace {

qc::ElementType format(const std::string& s) {
  QC_INPUT(s == "e4m3" || s == "e5m2", "FMT: expected e4m3 or e5m2, found `{}`", s);
  return s == "e4m3" ? qc::ElementType::e4m3 : qc::ElementType::e5m2;
}

qc::Tensor matrix(const char* path) {
  qc::Tensor t = qc::read_npy(path);
  QC_INPUT(t.dtype() == qc::DType::f32 && t.ndim() == 2, "{}: expected a 2-D float32 array, found {} {}", path,
           qc::dtype_name(t.dtype()), qc::shape_string(t.shape()));
  return t.contiguous();
}

qc::WeightScaleDtype scale_dtype(const std::string& s) {
  QC_INPUT(s == "f32" || s == "bf16", "DTYPE: expected f32 or bf16, found `{}`", s);
  return s == "f32" ? qc::WeightScaleDtype::f32 : qc::WeightScaleDtype::bf16;
}

// What a mode writes: the codes Q [rows, k] (uint8) and the scales S (float32), to the last two paths
// of the command line.
struct Quantized {
  qc::Tensor q, s;
  Quantized(int64_t rows, int64_t k, std::vector<int64_t> scale_shape)
      : q(qc::Tensor::empty(qc::DType::u8, {rows, k})), s(qc::Tensor::empty(qc::DType::f32, std::move(scale_shape))) {}
  int write(int argc, char** argv) const {
    qc::write_npy(argv[argc - 2], q);
    qc::write_npy(argv[argc - 1], s);
    return 0;
  }
};

}  // namespace

int main(int argc, char** argv) try {
  QC_INPUT(argc >= 2, "usage: qc_quantize act|weight ...");
  const std::string mode = argv[1];
  if (mode == "act") {
    QC_INPUT(argc == 7, "usage: qc_quantize act FMT per-token|per-tensor X.npy Q.npy S.npy");
    const qc::Fp8ActScaling scaling = qc::parse_fp8_act_scaling(argv[3]);  // the CLI's spelling and parser
    const qc::Tensor x = matrix(argv[4]);
    const int64_t m = x.shape()[0], k = x.shape()[1];
    Quantized out(m, k, {m});
    qc::quantize_activations_fp8(format(argv[2]), scaling, x.data<float>(), m, k, out.q.data<uint8_t>(),
                                 out.s.data<float>());
    return out.write(argc, argv);
  }
  if (mode == "group") {
    QC_INPUT(argc == 8, "usage: qc_quantize group vllm|sglang|deepgemm 0|1 G X.npy Q.npy S.npy");
    const qc::GroupQuantizer quantizer = qc::group_quantizer(argv[2], "QUANTIZER");
    const bool ue8m0 = std::string(argv[3]) == "1";
    const int64_t g = std::stoll(argv[4]);
    const qc::Tensor x = matrix(argv[5]);
    const int64_t m = x.shape()[0], k = x.shape()[1];
    Quantized out(m, k, {m, (k + g - 1) / g});
    qc::quantize_activations_fp8_groups(qc::ElementType::e4m3, quantizer, g, ue8m0, x.data<float>(), m, k,
                                        out.q.data<uint8_t>(), out.s.data<float>());
    return out.write(argc, argv);
  }
  if (mode == "block") {
    QC_INPUT(argc == 10, "usage: qc_quantize block deepgemm|compressed-tensors 0|1 BN BK f32|bf16 W.npy Q.npy S.npy");
    const qc::BlockQuantizer quantizer = qc::block_quantizer(argv[2], "QUANTIZER");
    const bool ue8m0 = std::string(argv[3]) == "1";
    const int64_t bn = std::stoll(argv[4]), bk = std::stoll(argv[5]);
    const qc::WeightScaleDtype dtype = scale_dtype(argv[6]);
    const qc::Tensor w = matrix(argv[7]);
    const int64_t n = w.shape()[0], k = w.shape()[1];
    Quantized out(n, k, {(n + bn - 1) / bn, (k + bk - 1) / bk});
    qc::quantize_weights_fp8_blocks(qc::ElementType::e4m3, quantizer, bn, bk, ue8m0, w.data<float>(), n, k,
                                    out.q.data<uint8_t>(), out.s.data<float>(), dtype);
    return out.write(argc, argv);
  }
  QC_INPUT(mode == "weight", "mode: expected act, weight, group or block, found `{}`", mode);
  QC_INPUT(argc == 8, "usage: qc_quantize weight FMT per-channel|per-tensor f32|bf16 W.npy Q.npy S.npy");
  const qc::WeightScaling scaling = qc::parse_weight_scaling(argv[3]);
  const qc::WeightScaleDtype dtype = scale_dtype(argv[4]);
  const qc::Tensor w = matrix(argv[5]);
  const int64_t n = w.shape()[0], k = w.shape()[1];
  Quantized out(n, k, {n});
  qc::quantize_weights_fp8(format(argv[2]), scaling, w.data<float>(), n, k, out.q.data<uint8_t>(), out.s.data<float>(),
                           dtype);
  return out.write(argc, argv);
} catch (const qc::Error& e) {
  std::fprintf(stderr, "qc_quantize: %s\n", e.what());
  return 2;
}
