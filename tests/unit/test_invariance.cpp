// C8, invariance (src/checks/c8_*.cpp): the judged cases of issue #31 on small shapes.
// - cpu:vllm-cutlass is certified invariant over batch sizes and mates (the integer alibi and a
//   per-element epilogue);
// - the M-threshold control mutant-shape:swap-ab-m<T> is found variant with its threshold, and the
//   differing elements are predicted element for element (checked here against an independent
//   evaluation of the two formulas);
// - a CPU arm at TP 1/2/4/8 with ring and tree reductions: predicted == observed; the reduction-order
//   control mutant:tree-from-4 is caught (the declared ring fails from degree 4) and predicted from
//   the collective's record;
// - the reduction models' closed forms against their step-by-step executions and a hand-written
//   formulation.
#include <gtest/gtest.h>

#include <set>

#include "checks/c1_block_model.hpp"
#include "checks/c8_decoder.hpp"
#include "checks/c8_invariance.hpp"
#include "checks/c8_tp.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"
#include "qconform/epilogue.hpp"
#include "qconform/error.hpp"
#include "qconform/numerics.hpp"
#include "synth/synth.hpp"

namespace qc {
namespace {

LayerOperands synth_layer(const std::string& shape, uint64_t seed, const std::string& element = "int8",
                          bool bias = false) {
  SynthOptions o;
  o.shapes = shape;
  o.seed = seed;
  o.element = element;
  o.bias = bias;
  std::vector<LayerOperands> layers = synth_operands(o);
  return layers.at(0);
}

LayerOperands named(LayerOperands ops, const std::string& name) {
  ops.name = name;
  return ops;
}

TEST(Invariance, DefaultBatchSizesHoldTheBucketEdgesAndTheLayersM) {
  const std::vector<int64_t> s = default_batch_sizes(200);
  for (int64_t b : {1, 2, 15, 16, 17, 33, 63, 64, 65, 127, 128, 129, 200}) {
    EXPECT_NE(std::find(s.begin(), s.end(), b), s.end()) << b;
  }
  EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
  EXPECT_EQ(s.back(), 200);
  EXPECT_EQ(default_batch_sizes(1), std::vector<int64_t>{1});
}

TEST(Invariance, CpuVllmCutlassIsCertifiedInvariant) {
  const LayerOperands ops = synth_layer("70x32x64", 5);
  auto arm = make_arm("cpu:vllm-cutlass");
  const LayerInvariance r = layer_invariance(*arm, ops, InvarianceOptions{});
  ASSERT_TRUE(r.verdict.has_value());
  EXPECT_EQ(*r.verdict, kInvariant) << describe(r);
  ASSERT_GT(r.configs.size(), 20u);
  std::set<std::string> mates;
  for (const InvarianceConfig& c : r.configs) {
    mates.insert(c.mates);
    EXPECT_EQ(c.rows, ops.m) << "every row observed once: M'=" << c.batch << " " << c.mates;
    EXPECT_EQ(c.observed_diff, 0);
    EXPECT_EQ(c.predicted_diff, 0) << "the claim is evaluated and predicts no difference";
    EXPECT_EQ(c.mispredicted, 0);
    EXPECT_EQ(c.claim_mismatch, 0) << "the arm computes its declared formula";
    EXPECT_EQ(c.acc_diff, 0) << "the exposed accumulator does not vary";
    EXPECT_EQ(c.verdict, kInvariant);
  }
  EXPECT_EQ(mates, (std::set<std::string>{"ordered", "shuffled", "replaced"}));
  EXPECT_TRUE(r.thresholds.empty());
  EXPECT_EQ(c8_check("cpu:vllm-cutlass", {r}).verdict, Verdict::pass);
}

TEST(Invariance, SwapAbThresholdMutantIsFoundWithItsThresholdAndPredictedElementForElement) {
  // With a bias: the swap-AB instance (vllm-triton) adds it after the bf16 rounding, so many elements
  // differ (without one, the order of the scales alone changes a few per million).
  const LayerOperands ops = synth_layer("70x32x64", 6, "int8", /*bias=*/true);
  auto arm = make_arm("mutant-shape:swap-ab-m20");
  const LayerInvariance r = layer_invariance(*arm, ops, InvarianceOptions{});
  ASSERT_TRUE(r.verdict.has_value());
  EXPECT_EQ(*r.verdict, kVariantPredicted) << describe(r);
  ASSERT_EQ(r.thresholds.size(), 1u) << describe(r);
  EXPECT_NE(r.thresholds[0].find("threshold"), std::string::npos) << r.thresholds[0];
  EXPECT_NE(r.thresholds[0].find("M' = 20 "), std::string::npos) << r.thresholds[0];
  EXPECT_NE(r.thresholds[0].find("M' = 21 "), std::string::npos) << r.thresholds[0];
  // Independently: the elements where the swap-AB instance (vllm-triton order) and vllm-cutlass give
  // other bits, on the exact accumulator.
  const ExactAccumulators acc = exact_accumulate(ops.a_q.data(), ops.w_q.data(), {ops.m, ops.n, ops.k});
  const Epilogue& swapped = epilogue("vllm-triton");
  const Epilogue& normal = epilogue("vllm-cutlass-muladd");
  int64_t expected = 0;
  for (int64_t m = 0; m < ops.m; ++m) {
    for (int64_t n = 0; n < ops.n; ++n) {
      const int64_t v = acc.i32[m * ops.n + n];
      expected += swapped.apply(v, ops.a_scale[m], ops.w_scale[n], ops.bias[n], 1, ops.n) !=
                  normal.apply(v, ops.a_scale[m], ops.w_scale[n], ops.bias[n], ops.m, ops.n);
    }
  }
  ASSERT_GT(expected, 0) << "the two orders must differ somewhere on these operands";
  bool saw_small = false, saw_large = false;
  for (const InvarianceConfig& c : r.configs) {
    if (c.mates == "replaced") continue;  // replaced mates observe half the rows per batch: sizes differ
    if (c.batch <= 20) {
      saw_small = true;
      EXPECT_EQ(c.observed_diff, expected) << "M'=" << c.batch << " " << c.mates;
      EXPECT_EQ(c.verdict, kVariantPredicted) << c.batch;
      EXPECT_EQ(c.stage, "epilogue");
    } else {
      saw_large = true;
      EXPECT_EQ(c.observed_diff, 0) << c.batch;
    }
    EXPECT_EQ(c.mispredicted, 0) << "M'=" << c.batch << " " << c.mates;
    EXPECT_EQ(c.predicted_diff, c.observed_diff);
    EXPECT_EQ(c.acc_diff, 0) << "the alibi: the accumulator never varies";
  }
  EXPECT_TRUE(saw_small && saw_large);
  EXPECT_EQ(c8_check("mutant-shape:swap-ab-m20", {r}).verdict, Verdict::reported);

  // Predicted from its declaration alone (vllm-cutlass everywhere), the variance is unexplained.
  InvarianceOptions declared;
  declared.use_records = false;
  declared.mates = {"ordered"};
  const LayerInvariance d = layer_invariance(*arm, ops, declared);
  ASSERT_TRUE(d.verdict.has_value());
  EXPECT_EQ(*d.verdict, kVariantUnexplained) << describe(d);
  EXPECT_EQ(c8_check("x", {d}).verdict, Verdict::fail);
}

TEST(Invariance, NothingToCompareIsNullNotPass) {
  const LayerOperands ops = synth_layer("1x16x32", 7);
  auto arm = make_arm("cpu:vllm-cutlass");
  InvarianceOptions o;
  o.mates = {"replaced"};  // a batch of one has no mates
  const LayerInvariance r = layer_invariance(*arm, ops, o);
  EXPECT_FALSE(r.verdict.has_value());
  EXPECT_TRUE(to_json(r)["verdict"].is_null());
  EXPECT_EQ(c8_check("cpu:vllm-cutlass", {r}).verdict, Verdict::not_applicable);
}

TEST(Invariance, Fp8ArmUnderItsModelIsInvariantAndPredicted) {
  const LayerOperands ops = synth_layer("40x16x64", 8, "e4m3");
  auto arm = make_arm("cpu:fp8-hopper-fp8-chain");
  InvarianceOptions o;
  o.batch_sizes = {1, 7, 33, 40};
  const LayerInvariance r = layer_invariance(*arm, ops, o);
  ASSERT_TRUE(r.verdict.has_value());
  EXPECT_EQ(*r.verdict, kInvariant) << describe(r);
  for (const InvarianceConfig& c : r.configs) EXPECT_EQ(c.claim_mismatch, 0) << describe(r);
}

TEST(Invariance, Fp8SplitKThresholdMutantIsPredictedFromItsRecordsInTheAccumulationStage) {
  const LayerOperands ops = synth_layer("48x16x1024", 13, "e4m3");
  auto arm = make_arm("mutant-shape:fp8-splitk-m8");
  InvarianceOptions o;
  o.batch_sizes = {1, 4, 16, 48};
  o.mates = {"ordered"};
  const LayerInvariance r = layer_invariance(*arm, ops, o);
  ASSERT_TRUE(r.verdict.has_value());
  EXPECT_EQ(*r.verdict, kVariantPredicted) << describe(r);
  for (const InvarianceConfig& c : r.configs) {
    EXPECT_EQ(c.mispredicted, 0) << describe(r);
    EXPECT_EQ(c.claim_mismatch, 0);
    if (c.batch <= 8) {
      EXPECT_GT(c.observed_diff, 0) << c.batch;
      EXPECT_EQ(c.stage, "accumulation");
    } else {
      EXPECT_EQ(c.observed_diff, 0) << c.batch;
    }
  }
  ASSERT_EQ(r.thresholds.size(), 1u) << describe(r);
  EXPECT_NE(r.thresholds[0].find("M' = 8 "), std::string::npos) << r.thresholds[0];
  EXPECT_NE(r.thresholds[0].find("M' = 9 "), std::string::npos) << r.thresholds[0];
}

// A block-scaled layer (per-token-group:32 activations, per-block:16x32 weights, random scales with
// fraction bits, so the promotion forms round differently) under a block arm: every batch is predicted
// from the run's claimed block model, and the arm's output equals that prediction everywhere.
LayerOperands block_layer(int64_t m, int64_t n, int64_t k, uint64_t seed, const std::string& name) {
  return named(random_block_layer(m, n, k, /*block_k=*/32, /*block_n=*/16, seed), name);
}

TEST(Invariance, BlockScaledFp8ArmIsPredictedFromItsBlockModel) {
  const LayerOperands ops = block_layer(40, 32, 128, 14, "model.layers.0.mlp.gate_proj");
  auto arm = make_arm("cpu:fp8-block-triton");
  InvarianceOptions o;
  o.batch_sizes = {1, 5, 17, 40};
  const LayerInvariance r = layer_invariance(*arm, ops, o);
  ASSERT_TRUE(r.verdict.has_value()) << describe(r);
  EXPECT_EQ(*r.verdict, kInvariant) << describe(r);
  EXPECT_EQ(r.reference_claim, "block-triton; bf16(D)");
  for (const InvarianceConfig& c : r.configs) {
    EXPECT_EQ(c.predicted_diff, 0) << describe(r);  // a prediction was made (not -1) and is empty
    EXPECT_EQ(c.claim_mismatch, 0) << describe(r);
    EXPECT_EQ(c.elements, ops.m * ops.n);
  }
}

// Mates from other prompts: a plain run records each sequence's rows per layer; a prompt's call then runs
// with the rows of the other sequences as its mates (never its own), in the pool's order, and the layer's
// first M outputs are the prompt's. Checked on what the inner function receives.
TEST(DecoderInvariance, MatesFromOtherPromptsAreTheirRowsNeverTheOwnOnes) {
  LinearLayer layer;
  layer.name = "model.layers.0.mlp.up_proj";
  layer.k_in = 3, layer.n_out = 2;
  std::vector<std::vector<float>> seen;  // the rows the inner function received, per call
  const LinearFn inner = [&](const LinearLayer& l, const float* x, int64_t M, float* y) {
    seen.emplace_back(x, x + M * l.k_in);
    for (int64_t i = 0; i < M * l.n_out; ++i) y[i] = x[(i / l.n_out) * l.k_in];
  };
  auto pool = std::make_shared<PromptRows>();
  const LinearFn record = with_row_recorder(inner, pool);
  std::vector<float> y(4);
  const std::vector<float> seq0 = {1, 2, 3}, seq1 = {4, 5, 6, 7, 8, 9};
  pool->current = 0;
  record(layer, seq0.data(), 1, y.data());
  pool->current = 1;
  record(layer, seq1.data(), 2, y.data());
  ASSERT_EQ(pool->rows[layer.name].size(), 3u);

  const LinearFn batched = with_batch_mates(inner, {2}, 0, nullptr, pool);
  seen.clear();
  pool->current = 0;  // sequence 0's call: its mates are sequence 1's two rows
  batched(layer, seq0.data(), 1, y.data());
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_EQ(seen[0].size(), 9u);
  EXPECT_EQ(std::vector<float>(seen[0].begin(), seen[0].begin() + 3), seq0);
  for (int r = 1; r < 3; ++r) {
    const std::vector<float> mate(seen[0].begin() + 3 * r, seen[0].begin() + 3 * r + 3);
    EXPECT_TRUE(mate == std::vector<float>(seq1.begin(), seq1.begin() + 3) || mate == std::vector<float>(seq1.begin() + 3, seq1.end()))
        << "mate " << r << " is not a row of sequence 1";
  }
  EXPECT_EQ(y[0], 1.0f);  // the prompt's own output, not a mate's
  seen.clear();
  pool->current = 1;  // sequence 1's call: its mates can only be sequence 0's row
  batched(layer, seq1.data(), 2, y.data());
  ASSERT_EQ(seen[0].size(), 12u);
  for (int r = 2; r < 4; ++r) EXPECT_EQ(std::vector<float>(seen[0].begin() + 3 * r, seen[0].begin() + 3 * r + 3), seq0);
  EXPECT_EQ(pool->from_prompts.load(), 4);
  EXPECT_EQ(pool->synthetic.load(), 0);
  // A layer no other sequence reached: synthetic mates, counted.
  LinearLayer other = layer;
  other.name = "model.layers.1.mlp.up_proj";
  batched(other, seq1.data(), 2, y.data());
  EXPECT_EQ(pool->synthetic.load(), 2);
}

// --- reduction models ---------------------------------------------------------------------------

Partials random_partials(int t, int64_t count, uint64_t seed) {
  Partials p(static_cast<size_t>(t), std::vector<uint16_t>(static_cast<size_t>(count)));
  uint64_t s = seed;
  for (auto& v : p) {
    for (auto& x : v) {
      const float f = static_cast<float>(static_cast<int64_t>(splitmix64(s) % 20001) - 10000) / 997.0f;
      x = f32_to_bf16(f);
    }
  }
  return p;
}

TEST(ReductionModels, ClosedFormEqualsTheStepByStepExecution) {
  for (const char* spec : {"sequential", "ring", "ring:3", "ring:16", "tree", "sequential+fp32", "ring+fp32",
                           "ring:5+fp32", "tree+fp32"}) {
    const ReductionModel m = parse_reduction_model(spec, "test");
    EXPECT_EQ(parse_reduction_model(m.name(), "test"), m) << spec;
    for (int t : {1, 2, 3, 4, 5, 6, 8}) {
      for (int64_t count : {1, 7, 64, 100}) {
        const Partials p = random_partials(t, count, 1000 * t + count);
        EXPECT_EQ(reduce_closed_form(m, p), reduce_by_steps(m, p)) << spec << " T=" << t << " count=" << count;
      }
    }
  }
}

// A third formulation, written out by hand for four ranks.
uint16_t add_bf16(uint16_t a, uint16_t b) { return f32_to_bf16(bf16_to_f32(a) + bf16_to_f32(b)); }

TEST(ReductionModels, FourRanksMatchTheirHandWrittenOrders) {
  const int64_t count = 100;  // ring: one loop of chunks alignUp(25, 8) = 32: [0,32) [32,64) [64,96) [96,100)
  const Partials p = random_partials(4, count, 77);
  const auto seq = reduce_closed_form(parse_reduction_model("sequential", "t"), p);
  const auto tree = reduce_closed_form(parse_reduction_model("tree", "t"), p);
  const auto ring = reduce_closed_form(parse_reduction_model("ring", "t"), p);
  const auto tree32 = reduce_closed_form(parse_reduction_model("tree+fp32", "t"), p);
  int64_t ring_vs_tree = 0;
  for (int64_t e = 0; e < count; ++e) {
    const auto q = [&](int r) { return p[r][e]; };
    EXPECT_EQ(seq[e], add_bf16(add_bf16(add_bf16(q(0), q(1)), q(2)), q(3))) << e;
    EXPECT_EQ(tree[e], add_bf16(add_bf16(q(0), q(1)), add_bf16(q(2), q(3)))) << e;
    const int c = static_cast<int>(e / 32);
    EXPECT_EQ(ring[e], add_bf16(add_bf16(add_bf16(q((c + 1) % 4), q((c + 2) % 4)), q((c + 3) % 4)), q(c))) << e;
    const float f = (bf16_to_f32(q(0)) + bf16_to_f32(q(1))) + (bf16_to_f32(q(2)) + bf16_to_f32(q(3)));
    EXPECT_EQ(tree32[e], f32_to_bf16(f)) << e;
    ring_vs_tree += ring[e] != tree[e];
  }
  EXPECT_GT(ring_vs_tree, 0) << "the orders must be distinguishable on these partials";
}

TEST(ReductionModels, BadSpellingsAreInputErrors) {
  for (const char* bad : {"", "rings", "ring:", "ring:0", "ring:-4", "tree+fp16", "ring:4x"}) {
    EXPECT_THROW(parse_reduction_model(bad, "--reduction"), Error) << bad;
  }
  EXPECT_THROW(make_collective("mutant:tree-from-1"), Error);
  EXPECT_THROW(make_collective("mutant:nope"), Error);
}

// --- tensor parallelism ---------------------------------------------------------------------------


TEST(TensorParallel, StylesFollowTheProjection) {
  EXPECT_EQ(parallel_style_of("model.layers.3.self_attn.o_proj"), ParallelStyle::row);
  EXPECT_EQ(parallel_style_of("model.layers.3.mlp.down_proj"), ParallelStyle::row);
  EXPECT_EQ(parallel_style_of("model.layers.3.self_attn.q_proj"), ParallelStyle::column);
  EXPECT_EQ(parallel_style_of("model.layers.3.mlp.gate_proj"), ParallelStyle::column);
}

TEST(TensorParallel, RowParallelCpuArmAtOneTwoFourEightRanksIsPredictedUnderRingAndTree) {
  const LayerOperands ops = named(synth_layer("8x24x256", 9), "model.layers.0.self_attn.o_proj");
  auto arm = make_arm("cpu:vllm-cutlass");
  for (const char* reduction : {"ring", "tree", "ring:8", "ring+fp32"}) {
    TpOptions o;
    o.declared = reduction;
    const LayerTp r = layer_tp(*arm, ops, o);
    ASSERT_EQ(r.degrees.size(), 4u);
    EXPECT_EQ(r.style, ParallelStyle::row);
    int64_t differing = 0;
    for (const TpDegree& d : r.degrees) {
      ASSERT_TRUE(d.applicable) << d.note;
      EXPECT_EQ(d.predicted_mismatch, 0) << reduction << " TP=" << d.degree << "\n" << describe(r);
      EXPECT_EQ(d.mispredicted, 0) << reduction << " TP=" << d.degree;
      EXPECT_EQ(d.predicted_diff, d.observed_diff);
      EXPECT_EQ(d.declared_mismatch, 0);
      EXPECT_NE(d.verdict.value_or(""), kVariantUnexplained);
      differing += d.observed_diff;
    }
    EXPECT_GT(differing, 0) << reduction << ": per-shard bf16 partials change bits between degrees";
    EXPECT_EQ(r.verdict.value_or(""), kVariantPredicted) << describe(r);
  }
}

TEST(TensorParallel, ColumnParallelPerElementEpilogueIsInvariant) {
  const LayerOperands ops = named(synth_layer("8x32x64", 10), "model.layers.0.self_attn.q_proj");
  auto arm = make_arm("cpu:vllm-cutlass");
  const LayerTp r = layer_tp(*arm, ops, TpOptions{});
  EXPECT_EQ(r.verdict.value_or(""), kInvariant) << describe(r);
}

TEST(TensorParallel, DegreeThatDoesNotDivideIsNotApplicable) {
  const LayerOperands ops = named(synth_layer("4x24x36", 11), "model.layers.0.mlp.down_proj");
  auto arm = make_arm("cpu:vllm-cutlass");
  TpOptions o;
  o.degrees = {1, 8};
  const LayerTp r = layer_tp(*arm, ops, o);
  ASSERT_EQ(r.degrees.size(), 2u);
  EXPECT_FALSE(r.degrees[1].applicable);
  EXPECT_TRUE(to_json(r)["degrees"][1]["verdict"].is_null());
}

// Block-scaled layers are cut on their scale blocks: K = 128 in blocks of 32 runs at TP 1, 2, 4 and is
// not applicable at 8 (16 columns a shard); N = 32 in weight blocks of 16 splits into 2, not 4.
TEST(TensorParallel, BlockScaledLayerIsShardedOnItsBlocksAndPredicted) {
  auto arm = make_arm("cpu:fp8-block-triton");
  TpOptions o;
  o.declared = "tree";
  const LayerTp row = layer_tp(*arm, block_layer(8, 32, 128, 16, "model.layers.0.mlp.down_proj"), o);
  ASSERT_EQ(row.degrees.size(), 4u);
  for (const TpDegree& d : row.degrees) {
    if (d.degree == 8) {
      EXPECT_FALSE(d.applicable);
      EXPECT_NE(d.note.find("whole scale blocks of 32"), std::string::npos) << d.note;
      continue;
    }
    ASSERT_TRUE(d.applicable) << d.note;
    EXPECT_EQ(d.predicted_mismatch, 0) << describe(row);
    EXPECT_EQ(d.mispredicted, 0) << describe(row);
  }
  const LayerTp col = layer_tp(*arm, block_layer(8, 32, 128, 17, "model.layers.0.mlp.gate_proj"), o);
  EXPECT_TRUE(col.degrees[1].applicable) << col.degrees[1].note;
  EXPECT_EQ(col.degrees[1].observed_diff, 0) << describe(col);  // column shards: the same outputs
  EXPECT_EQ(col.degrees[1].verdict.value_or(""), kInvariant) << describe(col);
  EXPECT_FALSE(col.degrees[2].applicable);
  EXPECT_NE(col.degrees[2].note.find("whole weight blocks of 16 rows"), std::string::npos) << col.degrees[2].note;
}

// Independent of the prediction: with the activations' codes zero in the first half of K, shard 0 of a
// row-parallel TP 2 contributes +0 and shard 1 alone carries the layer, under the scale columns of the
// second half. Its output must then equal the unsharded run (a scale column taken from the wrong block
// would change it).
TEST(TensorParallel, RowShardsTakeTheScaleColumnsOfTheirOwnBlocks) {
  const LayerOperands base = block_layer(8, 32, 128, 18, "model.layers.0.mlp.down_proj");
  OperandStorage s;
  s.a_q.assign(base.a_q.begin(), base.a_q.end());
  for (int64_t r = 0; r < base.m; ++r) std::fill_n(&s.a_q[r * base.k], base.k / 2, int8_t{0});
  s.w_q.assign(base.w_q.begin(), base.w_q.end());
  s.a_scale.assign(base.a_scale.begin(), base.a_scale.end());
  s.w_scale.assign(base.w_scale.begin(), base.w_scale.end());
  s.a_type = s.w_type = ElementType::e4m3;
  s.a_scaling = base.a_scaling, s.w_scaling = base.w_scaling;
  const LayerOperands ops = make_operands(base.name, base.m, base.n, base.k, std::move(s), "test");
  auto arm = make_arm("cpu:fp8-block-triton");
  TpOptions o;
  o.degrees = {1, 2};
  o.declared = "sequential";
  const LayerTp r = layer_tp(*arm, ops, o);
  ASSERT_TRUE(r.degrees[1].applicable) << r.degrees[1].note;
  EXPECT_EQ(r.degrees[1].observed_diff, 0) << describe(r);
  EXPECT_EQ(r.degrees[1].predicted_mismatch, 0) << describe(r);
}

TEST(TensorParallel, ReductionOrderMutantIsCaughtAtItsDegreeAndPredictedFromItsRecord) {
  const LayerOperands ops = named(synth_layer("8x24x256", 12), "model.layers.0.mlp.down_proj");
  auto arm = make_arm("cpu:vllm-cutlass");
  TpOptions o;
  o.declared = "ring";
  o.collective = "mutant:tree-from-4";
  const LayerTp r = layer_tp(*arm, ops, o);
  ASSERT_EQ(r.degrees.size(), 4u);
  for (const TpDegree& d : r.degrees) {
    EXPECT_EQ(d.predicted_mismatch, 0) << "TP=" << d.degree << "\n" << describe(r);
    EXPECT_EQ(d.mispredicted, 0);
    if (d.degree == 2) {
      EXPECT_EQ(d.declared_mismatch, 0);
    }
    if (d.degree >= 4) {
      EXPECT_EQ(d.algorithm, "tree");
    }
  }
  EXPECT_GT(r.degrees[2].declared_mismatch + r.degrees[3].declared_mismatch, 0) << describe(r);
  bool threshold = false;
  for (const std::string& t : r.thresholds) threshold = threshold || t.find("from ring to tree at degree 4") != std::string::npos;
  EXPECT_TRUE(threshold) << describe(r);
  // Predicted from the declared ring alone, the tree degrees are unexplained.
  o.use_records = false;
  const LayerTp d = layer_tp(*arm, ops, o);
  EXPECT_EQ(d.verdict.value_or(""), kVariantUnexplained) << describe(d);
}

}  // namespace
}  // namespace qc
