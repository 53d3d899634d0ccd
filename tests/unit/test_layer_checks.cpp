// Layer-level checks: comparison statistics, operand files, scale regimes, and verify on CPU arms.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "qconform/arm.hpp"
#include "qconform/compare.hpp"
#include "qconform/error.hpp"
#include "checks/verify.hpp"
#include "qconform/numerics.hpp"
#include "core/fileio.hpp"
#include "core/operands_io.hpp"
#include "core/safetensors.hpp"
#include "synth/synth.hpp"

namespace qc {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / fmt::format("qc_layer_{}_{}", getpid(), name)).string();
}

TEST(Compare, CountsSignedZerosNaNsAndUlps) {
  // a: +0, 1.0, NaN, 2.0, inf ; b: -0, next(1.0), NaN (other payload), 2.0, inf
  const std::vector<uint16_t> a = {0x0000, 0x3F80, 0x7FC0, 0x4000, 0x7F80, 0x0001};
  const std::vector<uint16_t> b = {0x8000, 0x3F81, 0x7FC1, 0x4000, 0x7F80, 0x0001};
  const Comparison c = compare_bf16(a, b, 2, 3, "t");
  EXPECT_EQ(c.total, 6);
  EXPECT_EQ(c.bitwise_diff, 3);  // signed zero, one ulp, NaN payload
  EXPECT_EQ(c.signed_zero_diff, 1);
  EXPECT_EQ(c.nan_a, 1);
  EXPECT_EQ(c.nan_b, 1);
  EXPECT_EQ(c.inf_a, 1);
  EXPECT_EQ(c.subnormal_a, 1);
  EXPECT_EQ(c.finite_pairs, 4);
  EXPECT_EQ(c.nonfinite_pairs, 2);
  EXPECT_EQ(c.max_ulp, 1);
  EXPECT_EQ(c.ulp_histogram.at(0), 3);  // ±0 pair, 2.0 pair, subnormal pair
  EXPECT_EQ(c.ulp_histogram.at(1), 1);
  ASSERT_EQ(c.first.size(), 3u);
  EXPECT_EQ(c.first[1].row, 0);
  EXPECT_EQ(c.first[1].col, 1);
  EXPECT_EQ(c.first[1].ulp, 1);
  EXPECT_EQ(c.first[2].ulp, -1);
  EXPECT_NEAR(c.max_rel, 1.0 / 128.0, 1e-12);
  EXPECT_NE(describe(c.first[1]).find("0x3f81"), std::string::npos) << describe(c.first[1]);
}

TEST(Compare, IdenticalIsIdentical) {
  std::vector<uint16_t> a(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint16_t>(i * 37);
  const Comparison c = compare_bf16(a, a, 10, 100);
  EXPECT_TRUE(c.bit_identical());
  EXPECT_EQ(c.max_ulp, 0);
}

// The fast comparison (equal pairs in SIMD lanes, src/compare/compare_kernels.cpp) against its scalar
// reference, field for field (the JSON form holds every field, `first` included): every bf16 pattern
// against itself and against a neighbour, under near-zero limits on, between and around bf16 values
// (0, the smallest subnormal, NaN, infinity included), and mixes of equal and differing pairs with
// NaN, infinities, subnormals and signed zeros, over row ranges that end mid-vector, with short and
// long "first" lists.
TEST(Compare, FastRowsEqualTheReference) {
  const auto same = [](const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int64_t r0, int64_t r1,
                       int64_t cols, double near_zero, size_t listed, const std::string& what) {
    const Comparison fast = compare_bf16_rows(a, b, r0, r1, cols, "t", near_zero, listed);
    const Comparison ref = compare_bf16_rows_reference(a, b, r0, r1, cols, "t", near_zero, listed);
    const nlohmann::json jf = fast, jr = ref;
    ASSERT_EQ(jf.dump(), jr.dump()) << what << " rows [" << r0 << ", " << r1 << ") x " << cols << ", near_zero "
                                    << near_zero << ", listed " << listed;
  };
  std::vector<uint16_t> all(65536), next(65536);
  for (uint32_t u = 0; u < 65536; ++u) all[u] = static_cast<uint16_t>(u), next[u] = static_cast<uint16_t>(u + (u % 7 == 0));
  const double limits[] = {0.0, 0x1p-133, 1e-3, 0x1.02p-7, 0x1.03p-7, 1.0, 3.0e38, NAN, INFINITY};
  for (const double near_zero : limits) {
    same(all, all, 0, 256, 256, near_zero, 10, "every pattern with itself");
    same(all, next, 0, 256, 256, near_zero, 10, "every pattern with a neighbour");
  }
  std::mt19937_64 rng(14);
  const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff, 0x3f80, 0x7f7f};
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t cols = 1 + static_cast<int64_t>(rng() % 300), rows = 1 + static_cast<int64_t>(rng() % 40);
    std::vector<uint16_t> a(static_cast<size_t>(rows * cols)), b(a.size());
    const unsigned differ_per_mille = trial % 4 == 0 ? 0 : static_cast<unsigned>(rng() % 1000);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = rng() % 50 == 0 ? specials[rng() % std::size(specials)] : static_cast<uint16_t>(0x3000 + rng() % 0x1800);
      b[i] = rng() % 1000 < differ_per_mille ? (rng() % 10 == 0 ? specials[rng() % std::size(specials)]
                                                                 : static_cast<uint16_t>(a[i] + rng() % 5 - 2))
                                             : a[i];
    }
    const int64_t r0 = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
    for (size_t listed : {size_t{0}, size_t{3}, size_t{100000}}) {
      same(a, b, r0, rows, cols, near_zero_limit(a, {}), listed, fmt::format("trial {}", trial));
    }
  }
}

// The near-zero limit is fraction x RMS of the finite values of `a`, summed in blocks of 2^16 in index
// order and the blocks in order: written here as that plain loop, it must give the same double for
// sizes below one block, of whole groups of blocks and with a partial last block, NaN and inf included.
TEST(Operands, RoundTripAndNaturalOrder) {
  const auto layers = synth_operands({.shapes = "tiny", .m = 8, .seed = 3, .bias = true});
  ASSERT_EQ(layers.size(), 14u);
  const std::string path = temp_path("ops.safetensors");
  save_operands(path, layers, {{"source", "test"}});
  const OperandSet set = load_operands(path);
  ASSERT_EQ(set.layers.size(), layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    EXPECT_EQ(set.layers[i].name, layers[i].name);
    EXPECT_TRUE(std::equal(layers[i].a_q.begin(), layers[i].a_q.end(), set.layers[i].a_q.begin()));
    EXPECT_TRUE(std::equal(layers[i].w_q.begin(), layers[i].w_q.end(), set.layers[i].w_q.begin()));
    EXPECT_TRUE(std::equal(layers[i].bias.begin(), layers[i].bias.end(), set.layers[i].bias.begin()));
    EXPECT_EQ(0, std::memcmp(layers[i].a_scale.data(), set.layers[i].a_scale.data(), layers[i].a_scale.size_bytes()));
  }
  EXPECT_EQ(set.sha256.substr(0, 7), "sha256:");
  std::filesystem::remove(path);
  EXPECT_TRUE(natural_less("model.layers.2.q", "model.layers.10.q"));
  EXPECT_FALSE(natural_less("model.layers.10.q", "model.layers.2.q"));
}

// FP8 layers: the element types travel through the file as F8_E4M3 / F8_E5M2 tensors, mixed
// INT8/FP8 operands and non-finite FP8 codes are input errors naming the field and coordinates.
// validate() refuses `bad` with an input error whose message contains `needle`.
void expect_validate_refuses(const LayerOperands& bad, const std::string& needle) {
  try {
    bad.validate();
    ADD_FAILURE() << "no error; expected one containing " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Operands, Fp8LayersRoundTripAndNonFiniteCodesAreRefused) {
  OperandStorage st;
  st.a_q = {0x3C, static_cast<int8_t>(0xBC), 0x00, 0x01, 0x7B, 0x40};  // e5m2: 1, -1, 0, 2^-16, 57344, 2
  st.w_q = {0x38, 0x30, static_cast<int8_t>(0xFE), 0x7E, 0x08, 0x01, 0x00, 0x10, 0x20};  // e4m3 codes
  st.a_scale = {0.5f, 2.0f};
  st.w_scale = {1.0f, 0.25f, 3.0f};
  st.a_type = ElementType::e5m2;
  st.w_type = ElementType::e4m3;
  const LayerOperands ops = make_operands("fc", 2, 3, 3, st, "test");
  ops.validate();
  EXPECT_TRUE(ops.fp8());
  const std::string path = temp_path("fp8.safetensors");
  save_operands(path, {ops}, {});
  const SafetensorsFile raw = read_safetensors(path);
  EXPECT_EQ(raw.at("fc.a_q").dtype(), DType::e5m2);
  EXPECT_EQ(raw.at("fc.w_q").dtype(), DType::e4m3);
  const OperandSet set = load_operands(path);
  ASSERT_EQ(set.layers.size(), 1u);
  EXPECT_EQ(set.layers[0].a_type, ElementType::e5m2);
  EXPECT_EQ(set.layers[0].w_type, ElementType::e4m3);
  EXPECT_TRUE(std::equal(ops.w_q.begin(), ops.w_q.end(), set.layers[0].w_q.begin()));
  std::filesystem::remove(path);

  OperandStorage nan = st;
  nan.w_q[4] = 0x7F;  // e4m3fn NaN at [1,1]
  expect_validate_refuses(make_operands("fc", 2, 3, 3, nan, "test"), "`w_q`[1,1]: expected a finite e4m3 code, found 0x7f (NaN)");
  OperandStorage inf = st;
  inf.a_q[5] = static_cast<int8_t>(0xFC);  // e5m2 -inf at [1,2]
  expect_validate_refuses(make_operands("fc", 2, 3, 3, inf, "test"), "`a_q`[1,2]: expected a finite e5m2 code, found 0xfc (infinity)");
  OperandStorage mixed = st;
  mixed.a_type = ElementType::int8;
  expect_validate_refuses(make_operands("fc", 2, 3, 3, mixed, "test"), "expected both operands INT8 or both FP8, found a_q int8 and w_q e4m3");
}

// FP8 codes are scanned once when a file is loaded (they lie in its read-only mapping); any other
// bytes, or the same bytes under another element type, are scanned by validate() again.
TEST(Operands, Fp8CodesCheckedAtLoadAreScannedAgainOnlyWhenTheyAreOtherBytes) {
  OperandStorage st;
  st.a_q = {0x3C, static_cast<int8_t>(0xBC), 0x00, 0x01, 0x7B, 0x40};
  st.w_q = {0x38, 0x30, static_cast<int8_t>(0xFE), 0x7E, 0x08, 0x01, 0x00, 0x10, 0x20};  // 0x7E: 448 in e4m3
  st.a_scale = {0.5f, 2.0f};
  st.w_scale = {1.0f, 0.25f, 3.0f};
  st.a_type = st.w_type = ElementType::e4m3;
  const LayerOperands built = make_operands("fc", 2, 3, 3, st, "test");
  EXPECT_FALSE(built.checked_w.covers(built.w_q, built.w_type)) << "operands built in memory carry no mark";
  const std::string path = temp_path("fp8-checked.safetensors");
  save_operands(path, {built}, {});
  const OperandSet set = load_operands(path);
  const LayerOperands& loaded = set.layers.at(0);
  EXPECT_TRUE(loaded.checked_w.covers(loaded.w_q, loaded.w_type));
  const LayerOperands row = first_rows(loaded, 1);
  EXPECT_TRUE(row.checked_a.covers(row.a_q, row.a_type)) << "a row view";
  EXPECT_NO_THROW(apply_scale_mode(loaded, ScaleMode::pow2_layer).validate());

  std::vector<int8_t> other(st.w_q);
  other[5] = 0x7F;  // e4m3fn NaN at [1,2]
  LayerOperands swapped = loaded;
  swapped.w_q = other;
  expect_validate_refuses(swapped, "`w_q`[1,2]: expected a finite e4m3 code, found 0x7f (NaN)");
  LayerOperands retyped = loaded;  // the checked bytes read as e5m2: 0xFE (-448 in e4m3) is a NaN there
  retyped.a_type = retyped.w_type = ElementType::e5m2;
  expect_validate_refuses(retyped, "`w_q`[0,2]: expected a finite e5m2 code, found 0xfe (NaN)");
  std::filesystem::remove(path);
}

// A file's layers are checked on every core; with several bad layers the error names the first in layer
// order, on every run (not whichever thread found one first).
TEST(Operands, TheFirstBadLayerInOrderIsNamedWhateverTheThreads) {
  std::vector<LayerOperands> layers;
  std::vector<OperandStorage> storage(12);
  for (int i = 0; i < 12; ++i) {
    OperandStorage& st = storage[static_cast<size_t>(i)];
    st.a_q = {0x3C, 0x38, 0x30, 0x40};
    st.w_q.assign(64 * 2, 0x38);
    st.w_q[0] = static_cast<int8_t>(0x10 + i);  // the layer's mark, found in the file below
    st.w_q[1] = 0x55;
    st.w_q[2] = static_cast<int8_t>(0x20 + i);
    st.a_scale = {1.0f, 2.0f};
    st.w_scale.assign(64, 0.5f);
    st.a_type = st.w_type = ElementType::e4m3;
    layers.push_back(make_operands(fmt::format("layer{}", i), 2, 64, 2, st, "test"));
  }
  const std::string path = temp_path("fp8-bad-layers.safetensors");
  save_operands(path, layers, {});
  std::string bytes = read_file(path);
  for (int bad : {9, 4, 7}) {  // NaN codes in three layers; layer4 is the first in order
    const std::string mark = {static_cast<char>(0x10 + bad), 0x55, static_cast<char>(0x20 + bad)};
    const size_t at = bytes.find(mark);
    ASSERT_NE(at, std::string::npos) << bad;
    bytes[at + 1] = 0x7F;
  }
  write_file_atomic(path, bytes);
  for (int run = 0; run < 5; ++run) {
    try {
      load_operands(path);
      ADD_FAILURE() << "loaded a file with NaN codes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("layer `layer4`"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(path);
}

TEST(Operands, SynthIsDeterministic) {
  SynthOptions o;
  o.shapes = "4x64x96";
  o.seed = 11;
  const auto a = synth_operands(o), b = synth_operands(o);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].m, 4);
  EXPECT_TRUE(std::equal(a[0].a_q.begin(), a[0].a_q.end(), b[0].a_q.begin()));
  EXPECT_TRUE(std::equal(a[0].w_q.begin(), a[0].w_q.end(), b[0].w_q.begin()));
  o.seed = 12;
  const auto c = synth_operands(o);
  EXPECT_FALSE(std::equal(a[0].w_q.begin(), a[0].w_q.end(), c[0].w_q.begin()));
}

// A list of MxNxK shapes with one M: one layer per entry, in order; the first layer is the layer a
// single MxNxK gives (same seed, same bytes); differing M is an input error naming both.
TEST(Operands, SynthTakesAListOfShapesWithOneM) {
  SynthOptions o;
  o.shapes = "4x64x96,4x32x128";
  o.seed = 11;
  const auto list = synth_operands(o);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "layer0");
  EXPECT_EQ(list[1].name, "layer1");
  EXPECT_EQ(list[1].m, 4);
  EXPECT_EQ(list[1].n, 32);
  EXPECT_EQ(list[1].k, 128);
  o.shapes = "4x64x96";
  const auto one = synth_operands(o);
  EXPECT_TRUE(std::equal(one[0].w_q.begin(), one[0].w_q.end(), list[0].w_q.begin(), list[0].w_q.end()));
  o.shapes = "4x64x96,8x32x128";
  try {
    synth_operands(o);
    ADD_FAILURE() << "expected an input error for two M";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("same M"), std::string::npos) << e.what();
  }
}

// Writes a one-layer file with one field altered, and expects load_operands to name it.
void expect_bad_file(const std::string& what, const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit,
                     const std::string& needle) {
  std::vector<std::pair<std::string, Tensor>> t;
  Tensor a_q = Tensor::empty(DType::i8, {2, 4}), w_q = Tensor::empty(DType::i8, {3, 4});
  Tensor a_s = Tensor::empty(DType::f32, {2}), w_s = Tensor::empty(DType::f32, {3});
  std::fill_n(a_q.data<int8_t>(), 8, int8_t{1});
  std::fill_n(w_q.data<int8_t>(), 12, int8_t{2});
  std::fill_n(a_s.data<float>(), 2, 0.5f);
  std::fill_n(w_s.data<float>(), 3, 0.25f);
  t = {{"l.a_q", a_q}, {"l.w_q", w_q}, {"l.a_scale", a_s}, {"l.w_scale", w_s}};
  edit(t);
  const std::string path = temp_path(what + ".safetensors");
  write_safetensors(path, t);
  try {
    load_operands(path);
    ADD_FAILURE() << what << ": expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input) << what;
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << what << ": " << e.what();
  }
  std::filesystem::remove(path);
}

TEST(Operands, BadFilesAreClearErrors) {
  expect_bad_file("missing", [](auto& t) { t.erase(t.begin() + 3); }, "l.w_scale");
  expect_bad_file("dtype", [](auto& t) { t[0].second = Tensor::empty(DType::f32, {2, 4}); }, "expected dtype I8");
  expect_bad_file("kmismatch", [](auto& t) { t[1].second = Tensor::empty(DType::i8, {3, 5}); }, "same K");
  expect_bad_file("scalecount", [](auto& t) { t[2].second = Tensor::empty(DType::f32, {3}); }, "a_scale");
  expect_bad_file("nanscale", [](auto& t) { t[3].second.template data<float>()[1] = NAN; }, "w_scale");
  expect_bad_file("zeroscale", [](auto& t) { t[2].second.template data<float>()[0] = 0.0f; }, "a_scale");
  expect_bad_file("negscale", [](auto& t) { t[3].second.template data<float>()[0] = -1.0f; }, "w_scale");
  expect_bad_file("unknownkey", [](auto& t) { t.emplace_back("l.extra", Tensor::empty(DType::f32, {1})); }, "l.extra");
}

TEST(ScaleModes, PowersOfTwo) {
  SynthOptions o;
  o.shapes = "8x16x32";
  const auto ops = synth_operands(o)[0];
  for (ScaleMode mode : {ScaleMode::pow2_channel, ScaleMode::pow2_layer}) {
    const LayerOperands p = apply_scale_mode(ops, mode);
    for (float s : p.w_scale) {
      int e = 0;
      EXPECT_EQ(std::frexp(s, &e), 0.5f) << s;
    }
    if (mode == ScaleMode::pow2_channel) {
      EXPECT_TRUE(std::equal(ops.a_scale.begin(), ops.a_scale.end(), p.a_scale.begin()));
    } else {
      for (float s : p.a_scale) EXPECT_EQ(s, p.a_scale[0]);
    }
    EXPECT_EQ(p.a_q.data(), ops.a_q.data());  // shared, not copied
  }
}

std::vector<CheckResult> verify_tiny(const std::string& a, const std::string& b, bool bias,
                                     std::vector<int64_t> m_sweep = {}) {
  const auto layers = synth_operands({.shapes = "tiny", .m = 64, .seed = 7, .bias = bias});
  const PredictionSet p = predict(layers, "mem", "sha256:none");
  auto arm_a = make_arm(a), arm_b = make_arm(b);
  VerifyOptions options;
  options.m_sweep = std::move(m_sweep);
  return verify_layers(*arm_a, *arm_b, layers, p, options).checks;
}

TEST(Verify, CutlassVersusTritonPassesEveryCheck) {
  const auto checks = verify_tiny("cpu:vllm-cutlass", "cpu:vllm-triton", false, {1, 16, 64});
  ASSERT_EQ(checks.size(), 5u);
  for (const CheckResult& c : checks) EXPECT_EQ(c.verdict, Verdict::pass) << c.id << ": " << c.summary;
}

// verify's element pass emulates the declared formulas in blocks of rows; a formula that dispatches
// on the layer's shape (sglang-sm90: Triton order when M <= 16, or M <= 64 with N > 1280) must
// still see the layer's M. 16 threads make blocks of 8 rows of this 512 x 2048 layer.
TEST(Verify, ShapeDispatchingFormulaSeesTheLayerNotTheBlock) {
  SynthOptions o;
  o.shapes = "512x2048x1024";
  o.seed = 3;
  const auto layers = synth_operands(o);
  const PredictionSet p = predict(layers, "mem", "");
  VerifyOptions options;
  options.modes = {ScaleMode::real};
  options.threads = 16;
  auto sm90 = make_arm("cpu:sglang-sm90"), triton = make_arm("cpu:vllm-triton"), cutlass = make_arm("cpu:vllm-cutlass");
  // The case is sensitive: here the Triton and CUTLASS orders differ somewhere.
  const VerifyResult orders = verify_layers(*cutlass, *triton, layers, p, options);
  ASSERT_GT(orders.runs[0].predicted_diff, 0);
  const VerifyResult r = verify_layers(*sm90, *cutlass, layers, p, options);
  EXPECT_EQ(r.runs[0].arm[0].formula_mismatch, 0);  // the arm (whole layer: CUTLASS order) equals its formula
  EXPECT_EQ(r.runs[0].predicted_diff, 0);
  EXPECT_EQ(r.runs[0].cmp.bitwise_diff, 0);
  EXPECT_EQ(r.checks[4].verdict, Verdict::pass) << r.checks[4].summary;
}

TEST(Verify, BiasAfterRoundingIsNotCommutable) {
  const auto checks = verify_tiny("cpu:vllm-cutlass-fma", "cpu:vllm-triton", true);
  EXPECT_EQ(checks[3].id, "C5");
  EXPECT_EQ(checks[3].verdict, Verdict::not_applicable) << checks[3].summary;
  EXPECT_GT(checks[3].evidence["not_commutable_runs"].get<int64_t>(), 0);
}

TEST(Verify, StalePredictionsFailC2) {
  SynthOptions o;
  o.shapes = "8x32x64";
  const auto layers = synth_operands(o);
  PredictionSet p = predict(layers, "mem", "sha256:none");
  p.layers[0].stats.max_abs_acc += 1;
  auto arm = make_arm("cpu:vllm-cutlass");
  auto arm2 = make_arm("cpu:vllm-cutlass");
  const auto r = verify_layers(*arm, *arm2, layers, p, {});
  EXPECT_EQ(r.checks[0].verdict, Verdict::fail);
  EXPECT_EQ(r.checks[0].evidence["stale_predictions"].get<int64_t>(), 1);
}


// An arm that runs cpu:vllm-cutlass and then damages its output or its inputs, to show the checks
// fire on non-finite values (which a tolerance must never let through) and on written inputs.
class DamagingArm final : public Arm {
 public:
  DamagingArm(std::string what, int64_t index) : inner_(make_arm("cpu:vllm-cutlass")), what_(std::move(what)), index_(index) {}
  ArmInfo info() const override {
    ArmInfo i = inner_->info();
    i.label = "test:" + what_;
    i.epilogue.clear();  // no declared formula: only the comparison between the arms can see it
    return i;
  }
  ArmOutput run(const LayerOperands& ops) override {
    ArmOutput out = inner_->run(ops);
    if (what_ == "nan") out.y[static_cast<size_t>(index_)] = 0x7FC0;
    if (what_ == "neg-inf") out.y[static_cast<size_t>(index_)] = 0xFF80;
    if (what_ == "pos-inf") out.y[static_cast<size_t>(index_)] = 0x7F80;
    if (what_ == "write-input") const_cast<float&>(ops.a_scale[0]) *= 2.0f;
    if (what_ == "write-weight") const_cast<int8_t&>(ops.w_q[static_cast<size_t>(index_)]) ^= 0x10;
    out.record.arm = info().label;
    return out;
  }

 private:
  std::unique_ptr<Arm> inner_;
  std::string what_;
  int64_t index_;
};

// The layer verify_pair runs, the same bytes every time.
std::vector<LayerOperands> pair_layers() { return synth_operands({.shapes = "16x64x128", .seed = 5}); }

VerifyResult verify_pair(Arm& a, Arm& b, std::vector<ScaleMode> modes) {
  const auto layers = pair_layers();
  VerifyOptions options;
  options.modes = std::move(modes);
  return verify_layers(a, b, layers, predict(layers, "mem", ""), options);
}

// The check at `index` of the check table in `r`, which must be `id` and must have failed.
const CheckResult& failed(const VerifyResult& r, size_t index, const std::string& id) {
  const CheckResult& c = r.checks.at(index);
  EXPECT_EQ(c.id, id);
  EXPECT_EQ(c.verdict, Verdict::fail) << c.summary;
  return c;
}

TEST(Verify, NonFiniteMismatchFailsC6EvenWithEqualTotals) {
  // A NaN at element 3 in A and at element 7 in B: equal NaN counts on both sides.
  DamagingArm a("nan", 3), b("nan", 7);
  const auto r = verify_pair(a, b, {ScaleMode::real});
  failed(r, 4, "C6");
  EXPECT_EQ(r.total_real.nonfinite_diff, 2);
  // +inf against -inf at the same element.
  DamagingArm c("pos-inf", 5), d("neg-inf", 5);
  EXPECT_EQ(verify_pair(c, d, {ScaleMode::real}).checks[4].verdict, Verdict::fail);
}

TEST(Verify, NaNUnderPowerOfTwoScalesIsAViolationNotAnExclusion) {
  auto good = make_arm("cpu:vllm-cutlass");
  DamagingArm bad("nan", 9);
  const auto r = verify_pair(*good, bad, {ScaleMode::pow2_channel});
  const CheckResult& c5 = failed(r, 3, "C5");
  EXPECT_EQ(c5.evidence["violations"].get<int64_t>(), 1);
  EXPECT_EQ(c5.evidence["excluded"].get<int64_t>(), 0);
}

TEST(Verify, AnArmWritingIntoItsInputsFailsC3) {
  auto good = make_arm("cpu:vllm-cutlass");
  DamagingArm writer("write-input", 0);
  const auto r = verify_pair(*good, writer, {ScaleMode::real});
  failed(r, 1, "C3");
  ASSERT_EQ(r.runs.size(), 1u);
  // The note names the arm, the element, and both values with their bit patterns; the original
  // values come from the same synthetic operands made afresh.
  const auto fresh = pair_layers();
  const float s0 = fresh[0].a_scale[0];
  EXPECT_EQ(r.runs[0].operands_note,
            fmt::format("arm B modified its operands: a_scale[0]: {:.9g} (0x{:08x}) became {:.9g} (0x{:08x})", s0,
                        std::bit_cast<uint32_t>(s0), 2.0f * s0, std::bit_cast<uint32_t>(2.0f * s0)));

  // A weight byte written by arm A: w_q is [64, 128], so element 200 is [1, 72], bit 4 flipped.
  DamagingArm weight_writer("write-weight", 200);
  const auto w = verify_pair(weight_writer, *good, {ScaleMode::real});
  EXPECT_EQ(w.checks[1].verdict, Verdict::fail);
  const int8_t w0 = fresh[0].w_q[200], w1 = static_cast<int8_t>(w0 ^ 0x10);
  EXPECT_EQ(w.runs[0].operands_note,
            fmt::format("arm A modified its operands: w_q[1,72]: {} (0x{:02x}) became {} (0x{:02x})", w0,
                        static_cast<uint8_t>(w0), w1, static_cast<uint8_t>(w1)));
}

TEST(Verify, PredictionsWithAFalseSafeVerdictAreStale) {
  SynthOptions o;
  o.shapes = "8x32x64";
  const auto layers = synth_operands(o);
  PredictionSet p = predict(layers, "mem", "");
  ASSERT_TRUE(p.layers[0].safe);
  p.layers[0].safe = false;  // would silence C5 for the layer
  auto a = make_arm("cpu:vllm-cutlass"), b = make_arm("cpu:vllm-triton");
  VerifyOptions options;
  options.m_sweep = {1, 4};  // the full M is not among the runs: C2 still checks the whole layer
  const auto r = verify_layers(*a, *b, layers, p, options);
  EXPECT_EQ(r.checks[0].verdict, Verdict::fail);
  EXPECT_EQ(r.checks[0].evidence["stale_predictions"].get<int64_t>(), 1);
}

}  // namespace
}  // namespace qc
