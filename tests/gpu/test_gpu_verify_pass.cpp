// verify's device pipeline (docs/gpu.md, "verify on the device") against the host's pipeline, field for
// field: the real resident arms, and a test arm whose outputs are designed to reach every branch of the
// element pass (NaN, infinity, signed zeros, subnormals, distances beyond the small histogram, near-zero
// pairs, accumulator faults, outputs off their formula), under every scale regime and an M sweep. Also
// C3 on the device (an arm that writes into its operands is named with the element, old and new value),
// and C2's statistics from the device against the host's.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "arms/cuda/cuda.hpp"
#include "checks/verify.hpp"
#include "core/fileio.hpp"
#include "core/operands_io.hpp"
#include "core/sha256.hpp"
#include "core/tree_leaves.hpp"
#include "gpu_test_util.hpp"
#include "orchestrate/sweep.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"

#ifdef QC_WITH_CUDA  // the test binary is built everywhere; without CUDA it says SKIPPED before any test runs
#include <cuda_runtime.h>
#endif

namespace qc {
namespace {

// Rows and columns the CUDA arms take (multiples of 16), a bias on the second layer.
std::vector<LayerOperands> resident_layers() {
  return {gpu_test::make_layer("r.aligned", 96, 64, 2048, 11, false), gpu_test::make_layer("r.bias", 96, 48, 512, 12, true),
          gpu_test::make_layer("r.wide", 40, 4112, 256, 13, false)};
}

// A verify's JSON without what differs between the pipelines by design: the timings and the reference's place.
nlohmann::json comparable(const VerifyResult& r) {
  nlohmann::json j = to_json(r);
  for (const char* timing_or_place : {"seconds", "wall_seconds", "reference"}) j.erase(timing_or_place);
  return j;
}

nlohmann::json verify_json(Arm& a, Arm& b, const std::vector<LayerOperands>& layers, VerifyReference where,
                           std::vector<int64_t> m_sweep = {}) {
  const PredictionSet p = predict(layers, "mem", "sha256:none");
  VerifyOptions options;
  options.m_sweep = std::move(m_sweep);
  options.reference = where;
  const VerifyResult r = verify_layers(a, b, layers, p, options);
  const bool resident = r.reference.find("resident") != std::string::npos;
  EXPECT_EQ(resident, where == VerifyReference::gpu && a.info().resident && b.info().resident) << r.reference;
  return comparable(r);
}

// Field for field, as text: a NaN that a listed element holds is `null` in both (as a JSON value a NaN
// never equals itself).
void expect_same(const nlohmann::json& device, const nlohmann::json& host, const std::string& what) {
  EXPECT_EQ(device.dump(), host.dump()) << what << "\n" << nlohmann::json::diff(host, device).dump(1);
}

void expect_same_verify(const std::string& a, const std::string& b, const std::vector<LayerOperands>& layers,
                        std::vector<int64_t> m_sweep = {}) {
  auto arm_a = make_arm(a), arm_b = make_arm(b);
  const nlohmann::json device = verify_json(*arm_a, *arm_b, layers, VerifyReference::gpu, m_sweep);
  const nlohmann::json host = verify_json(*arm_a, *arm_b, layers, VerifyReference::cpu, m_sweep);
  expect_same(device, host, a + " vs " + b);
}

TEST(ResidentVerify, RealArmsGiveTheHostPipelinesResults) {
  const std::vector<LayerOperands> layers = resident_layers();
  const std::vector<LayerOperands> unbiased = {layers[0], layers[2]};
  expect_same_verify("cuda:mma-vllm-cutlass", "cuda:mma-vllm-triton", unbiased);
  expect_same_verify("cuda:mma-vllm-cutlass-muladd", "cuda:cublaslt-int8", layers);
  expect_same_verify("cuda:mma-sglang-sm90", "cuda:mma-vllm-cutlass", unbiased, {1, 17, 40});
}

// A weight of 143 MB, more than two of the largest slots (64 MiB, QC_UPLOAD_CHUNK_MIB's most), so that it
// goes up in several pieces whatever the setting (69 of 2 MiB by default), the last one short: through the
// pinned slots by parallel workers, each slot written again once its DMA is done; the results are the host
// pipeline's.
TEST(ResidentVerify, AStagedUploadGivesTheHostPipelinesResults) {
  const std::vector<LayerOperands> layers = {gpu_test::make_layer("r.staged", 16, 8192, 17424, 14, false)};
  ASSERT_GT(layers[0].w_q.size(), size_t{2} * (64 << 20));
  expect_same_verify("cuda:mma-vllm-cutlass", "cuda:mma-vllm-triton", layers);
}

// The tree digest's leaves hashed on the device as the pipeline uploads a file's arrays (docs/formats.md,
// "Tree digest"): every leaf wholly inside an a_q, w_q or bias array is given, each equal to OpenSSL's
// digest of the file's bytes there, and the tree finished from them is the file's, as is the plain digest
// awaited. The first layer is uploaded by `load` itself, the others ahead beside the runs; the arrays lie
// at offsets that are not multiples of the leaf (the kernel's other alignments: CudaSha256.*). The last
// layer's weight (2.1 MB) is read from the file with pread in pieces (1 MiB each with two workers or more),
// the last one short, by the upload workers: the results equal the host pipeline's on the same mapped layers.
TEST(ResidentVerify, TheDeviceHashesTheTreeLeavesOfWhatItUploads) {
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("qc-device-leaves-{}.safetensors", ::getpid())).string();
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove(path); }
  } remove{path};
  std::vector<LayerOperands> written = resident_layers();
  written.push_back(gpu_test::make_layer("r.staged-file", 32, 2064, 1040, 15, false));
  save_operands(path, written, {});
  OperandSet set = open_operands(path, /*with_digest=*/true, /*digest_beside=*/true, /*device_leaves=*/true);
  ASSERT_TRUE(set.tree_leaves != nullptr);
  EXPECT_EQ(set.tree_leaves->given_count(), 0u);
  uint64_t expected = 0;
  bool inside_a_leaf = false;  // an array that starts inside a leaf (its first leaf is the host's)
  for (const LayerOperands& l : set.layers) {
    for (const auto& [p, bytes] : {std::pair<const void*, size_t>{l.a_q.data(), l.a_q.size_bytes()},
                                   {l.w_q.data(), l.w_q.size_bytes()}, {l.bias.data(), l.bias.size_bytes()}}) {
      if (bytes == 0) continue;
      const auto found = find_mapped_leaves(p, bytes);
      ASSERT_TRUE(found.has_value()) << l.name;
      expected += whole_leaves(found->offset, bytes).count;
      inside_a_leaf = inside_a_leaf || found->offset % kTreeDigestLeaf != 0;
    }
  }
  ASSERT_GT(expected, 0u);
  EXPECT_TRUE(inside_a_leaf);
  auto a = make_arm("cuda:mma-vllm-cutlass-muladd"), b = make_arm("cuda:cublaslt-int8");
  VerifyOptions options;
  options.reference = VerifyReference::gpu;
  options.modes = {ScaleMode::real};
  const PredictionSet predictions = predict(set.layers, path, "sha256:none");
  const VerifyResult r = verify_layers(*a, *b, set.layers, predictions, options);
  ASSERT_NE(r.reference.find("resident"), std::string::npos) << r.reference;
  VerifyOptions on_host = options;
  on_host.reference = VerifyReference::cpu;
  expect_same(comparable(r), comparable(verify_layers(*a, *b, set.layers, predictions, on_host)),
              "the mapped layers, staged by pread");
  EXPECT_EQ(set.tree_leaves->given_count(), expected);
  const std::string bytes = read_file(path);
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < set.tree_leaves->count(); ++i) {
    const unsigned char* given = set.tree_leaves->given(i);
    if (given == nullptr) continue;
    Sha256 h;
    h.update(std::string_view(bytes).substr(i * kTreeDigestLeaf, kTreeDigestLeaf));
    const std::string want = h.bytes();
    if (std::memcmp(given, want.data(), 32) != 0 && wrong++ < 5) {
      const auto hex = [](const void* d) {
        std::string out;
        for (int j = 0; j < 32; ++j) out += fmt::format("{:02x}", static_cast<const unsigned char*>(d)[j]);
        return out;
      };
      ADD_FAILURE() << "leaf " << i << " (file bytes " << i * kTreeDigestLeaf << "..): device " << hex(given)
                    << ", OpenSSL " << hex(want.data());
    }
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(sha256_tree_file(path, 0, set.tree_leaves.get()), sha256_tree_file(path));
  set.await_sha256();
  EXPECT_EQ(set.sha256, sha256_file(path));
}

// Host bytes to the device on a resident run's stream, waited for (the host vectors go away on return).
void to_device(void* device, const void* host, size_t bytes, void* stream) {
#ifdef QC_WITH_CUDA
  const auto s = static_cast<cudaStream_t>(stream);
  EXPECT_EQ(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
#else
  ADD_FAILURE() << "to_device: this build has no CUDA (" << device << ", " << host << ", " << bytes << ", " << stream << ")";
#endif
}

// A resident arm of designed outputs: `cpu:vllm-cutlass`'s, then, by element index, a NaN, infinities
// of both signs, a -0 for a +0 (and the reverse), a subnormal, far distances (past the small histogram),
// a one-ulp change of a near-zero element, and accumulator faults. Deterministic in the element's row
// and column, so the host's `run` and the device's `run_resident` give the same outputs.
class DesignedArm final : public Arm {
 public:
  explicit DesignedArm(int pattern) : base_(make_arm("cpu:vllm-cutlass")), pattern_(pattern) {}
  ArmInfo info() const override {
    ArmInfo i = base_->info();
    i.label = fmt::format("test:designed-{}", pattern_);
    i.resident = true;
    i.exposes_accumulator = true;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    ArmOutput out = base_->run(ops);
    if (!out.acc) out.acc = std::vector<int32_t>(out.y.size(), 0);
    design(out.y, *out.acc, ops.n);
    out.record.arm = info().label;
    return out;
  }
  RunRecord run_resident(const ResidentOperands& ops, const ResidentOutputs& out) override {
    ArmOutput host = run(*ops.host);
    to_device(out.y, host.y.data(), host.y.size() * 2, ops.stream);
    if (out.acc != nullptr) to_device(out.acc, host.acc->data(), host.acc->size() * 4, ops.stream);
    return host.record;
  }

 private:
  void design(std::vector<uint16_t>& y, std::vector<int32_t>& acc, int64_t n) const {
    for (size_t i = 0; i < y.size(); ++i) {
      const int64_t code = (static_cast<int64_t>(i) * 2654435761ll + pattern_ * 97) % 1009;
      uint16_t& v = y[i];
      switch (code) {
        case 1: v = 0x7FC1; break;                            // a NaN with a payload
        case 2: v = 0x7F80; break;                            // +inf
        case 3: v = 0xFF80; break;                            // -inf
        case 4: v = (v & 0x7FFF) == 0 ? v ^ 0x8000 : 0x8000; break;  // -0 (or the other zero)
        case 5: v = 0x0003; break;                            // a subnormal
        case 6: v = static_cast<uint16_t>(v ^ 0x0400); break; // far away (128 ulps or more)
        case 7: v = static_cast<uint16_t>(v + 1); break;      // one ulp
        case 8: v = static_cast<uint16_t>(v ^ 0x8000); break; // the sign
        case 9: acc[i] ^= 0x40; break;                        // an accumulator fault
        case 10: acc[i] = 0x7FFFFFFF; break;                  // far beyond 2^24 (C2's part two)
        case 11: v = static_cast<uint16_t>(0x3000 + (i % n) % 7); break;  // near zero against the layer's rms
        default: break;
      }
      if (i % 1013 == 17) v = (pattern_ & 1) ? 0x8000 : 0x0000;  // odd patterns -0, even +0: a signed-zero pair
    }
  }
  std::unique_ptr<Arm> base_;
  int pattern_;
};

TEST(ResidentVerify, DesignedOutputsGiveTheHostPipelinesResults) {
  const std::vector<LayerOperands> layers = {resident_layers()[0], resident_layers()[2]};
  for (const auto& [pa, pb] : std::vector<std::pair<int, int>>{{1, 2}, {3, 0}}) {
    DesignedArm a(pa);
    std::unique_ptr<Arm> real = make_arm("cuda:mma-vllm-triton");
    DesignedArm b(pb);
    Arm& other = pb == 0 ? *real : static_cast<Arm&>(b);
    const nlohmann::json device = verify_json(a, other, layers, VerifyReference::gpu, {1, 17, 40});
    const nlohmann::json host = verify_json(a, other, layers, VerifyReference::cpu, {1, 17, 40});
    expect_same(device, host, fmt::format("designed {} vs {}", pa, pb));
    if (pb == 0) continue;
    // The design reaches the branches it is for (so that the equality above is not of empty counts).
    const nlohmann::json& cmp = host["total_real"];
    EXPECT_GT(cmp["nonfinite_diff"].get<int64_t>(), 0) << cmp.dump();
    EXPECT_GT(cmp["signed_zero_diff"].get<int64_t>(), 0) << cmp.dump();
    EXPECT_GT(cmp["near_zero_diff"].get<int64_t>(), 0) << cmp.dump();
    EXPECT_GT(cmp["max_ulp"].get<int64_t>(), 64) << cmp.dump();
  }
}

// FP8 layers (e4m3 codes, per-token and per-channel scales) the cuBLASLt arms take: N and K multiples of 16.
std::vector<LayerOperands> fp8_resident_layers() {
  return {synth_fp8_layer("f.k256", 64, 64, 256, 31, "test_gpu_verify_pass"),
          synth_fp8_layer("f.k2048", 40, 48, 2048, 32, "test_gpu_verify_pass")};
}

TEST(ResidentVerify, CublasLtFp8PairGivesTheHostPipelinesResults) {
  expect_same_verify("cuda:cublaslt-fp8", "cuda:cublaslt-fp8-fastacc", fp8_resident_layers());
  expect_same_verify("cuda:cublaslt-fp8-fastacc", "cuda:cublaslt-fp8", fp8_resident_layers(), {1, 16, 40});
}

// A resident FP8 arm of designed outputs: `cpu:fp8-hopper-fp8-promote4`'s outputs and fp32 accumulator,
// then, by element, outputs off the model (one ulp, a sign, a NaN, a near-zero value) and accumulator
// faults, the same on the host's `run` / `fp8_accumulate` and the device's `run_resident` /
// `accumulate_resident`.
class DesignedFp8Arm final : public Arm {
 public:
  explicit DesignedFp8Arm(int pattern) : base_(make_arm("cpu:fp8-hopper-fp8-promote4")), pattern_(pattern) {}
  ArmInfo info() const override {
    ArmInfo i = base_->info();
    i.label = fmt::format("test:designed-fp8-{}", pattern_);
    i.resident = true;
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    ArmOutput out = base_->run(ops);
    for (size_t i = 0; i < out.y.size(); ++i) {
      uint16_t& v = out.y[i];
      switch (code(i)) {
        case 1: v = static_cast<uint16_t>(v + 1); break;
        case 2: v = static_cast<uint16_t>(v ^ 0x8000); break;
        case 3: v = 0x7FC0; break;
        case 4: v = 0x2F00; break;
        default: break;
      }
    }
    out.record.arm = info().label;
    return out;
  }
  std::vector<float> fp8_accumulate(const uint8_t* a, const uint8_t* w, int64_t m, int64_t n, int64_t k,
                                    nlohmann::json& record, int threads) override {
    std::vector<float> d = base_->fp8_accumulate(a, w, m, n, k, record, threads);
    for (size_t i = 0; i < d.size(); ++i) {
      if (code(i) == 5) d[i] = f32_from_bits(f32_bits(d[i]) ^ 1u);
    }
    return d;
  }
  RunRecord run_resident(const ResidentOperands& ops, const ResidentOutputs& out) override {
    ArmOutput host = run(*ops.host);
    to_device(out.y, host.y.data(), host.y.size() * 2, ops.stream);
    return host.record;
  }
  RunRecord accumulate_resident(const ResidentOperands& ops, float* d) override {
    const LayerOperands& h = *ops.host;
    nlohmann::json record;
    const std::vector<float> host = fp8_accumulate(h.a_codes().data(), h.w_codes().data(), h.m, h.n, h.k, record, 0);
    to_device(d, host.data(), host.size() * 4, ops.stream);
    RunRecord r;
    r.extra = record.contains("extra") ? record["extra"] : record;
    return r;
  }

 private:
  int64_t code(size_t i) const { return (static_cast<int64_t>(i) * 40503 + pattern_ * 13) % 211; }
  std::unique_ptr<Arm> base_;
  int pattern_;
};

TEST(ResidentVerify, DesignedFp8OutputsGiveTheHostPipelinesResults) {
  DesignedFp8Arm a(1);
  std::unique_ptr<Arm> b = make_arm("cuda:cublaslt-fp8-fastacc");
  const std::vector<LayerOperands> layers = fp8_resident_layers();
  const nlohmann::json device = verify_json(a, *b, layers, VerifyReference::gpu, {1, 40});
  const nlohmann::json host = verify_json(a, *b, layers, VerifyReference::cpu, {1, 40});
  expect_same(device, host, "designed FP8 vs cuda:cublaslt-fp8-fastacc");
  // The design reaches what it is for: outputs off the model (listed), accumulator faults (listed).
  const std::string text = host.dump();
  EXPECT_NE(text.find("model hopper-fp8-promote4 + epilogue gives"), std::string::npos);
  EXPECT_NE(text.find("fp32 accumulator"), std::string::npos);
}

// An arm that writes into its operands after its kernel: C3 names the element, its old and new value.
class WritingArm final : public Arm {
 public:
  ArmInfo info() const override {
    ArmInfo i = base_->info();
    i.label = "test:writes-its-weights";
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override { return base_->run(ops); }
  RunRecord run_resident(const ResidentOperands& ops, const ResidentOutputs& out) override {
    RunRecord r = base_->run_resident(ops, out);
    const int8_t seven = 7;
    to_device(const_cast<int8_t*>(ops.w) + 2 * ops.host->k + 5, &seven, 1, ops.stream);
    return r;
  }

 private:
  std::unique_ptr<Arm> base_ = make_arm("cuda:mma-vllm-cutlass");
};

TEST(ResidentVerify, AnArmThatWritesItsOperandsIsNamedByC3) {
  std::vector<LayerOperands> layers = {gpu_test::make_layer("r.c3", 16, 32, 64, 21, false)};
  const int8_t before = layers[0].w_q[static_cast<size_t>(2 * 64 + 5)];
  ASSERT_NE(before, 7);
  WritingArm a;
  auto b = make_arm("cuda:mma-vllm-triton");
  const PredictionSet p = predict(layers, "mem", "sha256:none");
  VerifyOptions options;
  options.reference = VerifyReference::gpu;
  options.modes = {ScaleMode::real};
  const VerifyResult r = verify_layers(a, *b, layers, p, options);
  ASSERT_EQ(r.runs.size(), 1u);
  EXPECT_FALSE(r.runs[0].operands_identical);
  EXPECT_EQ(r.runs[0].operands_note,
            fmt::format("arm A modified its operands: w_q[2,5]: {} (0x{:02x}) became 7 (0x07)", before,
                        static_cast<uint8_t>(before)));
}

TEST(ResidentVerify, RangeStatisticsOnTheDeviceEqualTheHosts) {
  for (const LayerOperands& ops : resident_layers()) {
    GpuVerifyLayer gpu;
    gpu.load(ops);
    const RangeStats device = gpu.range_stats();
    const RangeStats host = exact_range_stats(ops.a_q.data(), ops.w_q.data(), {ops.m, ops.n, ops.k});
    EXPECT_EQ(device.max_abs_acc, host.max_abs_acc) << ops.name;
    EXPECT_EQ(device.argmax_m, host.argmax_m) << ops.name;
    EXPECT_EQ(device.argmax_n, host.argmax_n) << ops.name;
    EXPECT_EQ(device.count_above_2p24, host.count_above_2p24) << ops.name;
    EXPECT_EQ(device.count_inexact_fp32, host.count_inexact_fp32) << ops.name;
    EXPECT_EQ(device.headroom_bits, host.headroom_bits) << ops.name;
    EXPECT_EQ(device.a_contains_min, host.a_contains_min) << ops.name;
    EXPECT_EQ(device.data_independent_bound, host.data_independent_bound) << ops.name;
    EXPECT_EQ(device.bound_argmax_n, host.bound_argmax_n) << ops.name;
    EXPECT_EQ(device.bound_proves_safe, host.bound_proves_safe) << ops.name;
    // K >= 2048: the all -128 rows reach 2^14 K >= 2^25.
    if (ops.k >= 2048) {
      EXPECT_GT(host.count_above_2p24, 0) << ops.name << ": the extreme rows reach beyond 2^24";
    }
  }
}

}  // namespace
}  // namespace qc
