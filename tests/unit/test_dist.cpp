// The pieces multi-rank runs stand on, in one process: the balanced assignment, lossless per-layer
// results (what ranks send to rank 0 and --resume stores), merging parts in layer order, the work
// sharing of a world of one, and sharded operand sets. The multi-rank runs themselves are the ctest
// `mpi_runs` (tests/mpi/test_mpi.py).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "temp_dir.hpp"
#include "qconform/arm.hpp"
#include "dist/dist.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "checks/verify.hpp"
#include "qconform/numerics.hpp"
#include "core/operands_io.hpp"
#include "core/sha256.hpp"
#include "synth/synth.hpp"

namespace fs = std::filesystem;
using namespace qc;

namespace {

// The shared temporary directory of the unit tests (temp_dir.hpp), named for this file.
struct TempDir : qc::test::TempDir {
  TempDir() : qc::test::TempDir("dist") {}
};

std::vector<LayerOperands> tiny_layers() { return synth_operands({.shapes = "tiny", .m = 24, .seed = 11}); }

nlohmann::json without_timings(nlohmann::json j) {
  j.erase("seconds");
  j.erase("wall_seconds");
  return j;
}

}  // namespace

TEST(Dist, AssignmentIsBalancedByWorkAndDeterministic) {
  // Four large items and eight small ones over 3 ranks: by count a rank could get 2 large ones;
  // by work every rank gets at most 2 large and the loads differ by at most one large item.
  const std::vector<double> cost = {100, 1, 1, 100, 1, 1, 100, 1, 1, 100, 1, 1};
  const std::vector<int> owner = dist::assign_by_work(cost, 3);
  ASSERT_EQ(owner.size(), cost.size());
  std::vector<double> load(3, 0);
  for (size_t i = 0; i < cost.size(); ++i) {
    ASSERT_GE(owner[i], 0);
    ASSERT_LT(owner[i], 3);
    load[static_cast<size_t>(owner[i])] += cost[i];
  }
  // LPT: the large items go to ranks 0, 1, 2, 0 (ties to the lower rank), then the small ones fill
  // ranks 1 and 2 first.
  EXPECT_EQ(owner[0], 0);
  EXPECT_EQ(owner[3], 1);
  EXPECT_EQ(owner[6], 2);
  EXPECT_EQ(owner[9], 0);
  EXPECT_DOUBLE_EQ(load[0], 200);
  EXPECT_DOUBLE_EQ(load[1], 104);
  EXPECT_DOUBLE_EQ(load[2], 104);
  EXPECT_EQ(owner, dist::assign_by_work(cost, 3)) << "the assignment must not depend on anything but the costs";
  // Every item exactly once across ranks.
  size_t total = 0;
  for (int r = 0; r < 3; ++r) total += dist::owned_by(owner, r).size();
  EXPECT_EQ(total, cost.size());
  // One rank owns everything; more ranks than items leaves some empty.
  for (int o : dist::assign_by_work(cost, 1)) EXPECT_EQ(o, 0);
  EXPECT_TRUE(dist::owned_by(dist::assign_by_work({5, 5}, 4), 3).empty());
}

TEST(Dist, ShardsStayOnOneRankWhenTheBalanceAllows) {
  // Eight equal layers in four shards of two over 2 ranks: by shard the loads are 4/4, as by layer,
  // so each shard is read by one rank only.
  const std::vector<double> cost(8, 10);
  const std::vector<int64_t> shard = {0, 0, 1, 1, 2, 2, 3, 3};
  const std::vector<int> owner = dist::assign_by_work(cost, 2, shard);
  for (size_t i = 0; i < cost.size(); i += 2) EXPECT_EQ(owner[i], owner[i + 1]) << "shard " << shard[i] << " split";
  EXPECT_EQ(dist::owned_by(owner, 0).size(), 4u);
  EXPECT_EQ(dist::owned_by(owner, 1).size(), 4u);
  // One shard of everything over 2 ranks: keeping it whole would double the most loaded rank's
  // work (more than kGroupSlack), so the layers are shared one by one, as without groups.
  const std::vector<int64_t> one(8, 7);
  EXPECT_EQ(dist::assign_by_work(cost, 2, one), dist::assign_by_work(cost, 2));
  // Pairs of 21 unit layers: 11 units at most on a rank either way, so the pairs stay together; a
  // shard of 5 of 6 units would leave 5 on one rank against 3 by layer: shared layer by layer.
  const std::vector<double> mixed = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  std::vector<int64_t> pairs;
  for (size_t i = 0; i < mixed.size(); ++i) pairs.push_back(static_cast<int64_t>(i / 2));
  const std::vector<int> grouped = dist::assign_by_work(mixed, 2, pairs);
  for (size_t i = 0; i + 1 < mixed.size(); i += 2) EXPECT_EQ(grouped[i], grouped[i + 1]);
  EXPECT_EQ(dist::assign_by_work({3, 1, 1, 1}, 2, {0, 0, 0, 1}), dist::assign_by_work({3, 1, 1, 1}, 2))
      << "a shard of 5 of 6 units over 2 ranks (5 vs 3) is shared layer by layer";
}

TEST(Dist, ComparisonSurvivesJsonWithNonFiniteElements) {
  Comparison c;
  c.total = 10, c.bitwise_diff = 3, c.signed_zero_diff = 1, c.nan_a = 1, c.inf_b = 1, c.subnormal_a = 2;
  c.nonfinite_pairs = 2, c.nonfinite_diff = 2, c.finite_pairs = 8, c.ulp_histogram = {{0, 7}, {1, 1}, {300, 2}};
  c.max_ulp = 300, c.max_rel = 0.1234567890123456789, c.near_zero = 1, c.near_zero_diff = 1;
  c.near_zero_max_abs = 3.0e-38;
  c.first = {DiffElement{"l", 1, 2, 0x7fc0, 0x3f80, bf16_to_f32(0x7fc0), 1.0, -1},
             DiffElement{"l", 3, 4, 0xff80, 0x0001, bf16_to_f32(0xff80), bf16_to_f32(0x0001), -1}};
  const nlohmann::json j = c;
  const Comparison back = nlohmann::json::parse(j.dump()).get<Comparison>();
  EXPECT_EQ(nlohmann::json(back).dump(), j.dump());
  EXPECT_EQ(back.max_rel, c.max_rel);
  ASSERT_EQ(back.first.size(), 2u);
  EXPECT_TRUE(std::isnan(back.first[0].a)) << "NaN is written as null; it must come back from its bit pattern";
  EXPECT_EQ(back.first[1].a, -INFINITY);
  EXPECT_EQ(back.first[1].b_bits, 0x0001);
}

TEST(Dist, VerificationMergedFromPartsEqualsOneRun) {
  const std::vector<LayerOperands> layers = tiny_layers();
  const PredictionSet p = predict(layers, "tiny", "sha256:x");
  VerifyOptions options;
  options.reference = VerifyReference::cpu;
  auto a = make_arm("cpu:vllm-cutlass"), b = make_arm("cpu:vllm-triton");
  const VerifyResult whole = verify_layers(*a, *b, layers, p, options);

  // Odd layers in one part, even ones in another, in a different order of computation; every
  // layer's result through its JSON, as a rank sends it.
  std::map<size_t, nlohmann::json> sent;
  for (int parity : {1, 0}) {
    VerifySelection s;
    s.only = true;
    for (size_t i = static_cast<size_t>(parity); i < layers.size(); i += 2) s.layers.push_back(i);
    size_t done = 0;
    s.done = [&](size_t i, const LayerVerification& v) {
      sent[i] = nlohmann::json::parse(to_json(v).dump());
      ++done;
    };
    const VerifiedLayers part =
        verify_layer_runs(*a, *b, layers.size(), [&](size_t i) { return layers[i]; }, p, options, s);
    EXPECT_EQ(done, s.layers.size());
    EXPECT_EQ(part.layers.size(), s.layers.size());
  }
  std::vector<LayerVerification> all;
  for (size_t i = 0; i < layers.size(); ++i) {
    all.push_back(layer_verification_from_json(sent.at(i), "test"));
    EXPECT_EQ(to_json(all.back()).dump(), sent.at(i).dump()) << "layer " << i << " does not survive its JSON";
  }
  // One serializer: a run's lossless form is its public form (verify's `runs`) plus the fields that
  // make it read back exactly.
  const nlohmann::json public_runs = nlohmann::json::parse(to_json(whole)["runs"].dump());
  size_t k = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    for (const nlohmann::json& lossless : sent.at(i).at("runs")) {
      ASSERT_LT(k, public_runs.size());
      for (const auto& [key, value] : public_runs[k].items()) {
        ASSERT_TRUE(lossless.contains(key)) << "layer " << i << ": the lossless run lacks `" << key << "`";
        EXPECT_EQ(lossless.at(key), value) << "layer " << i << " `" << key << "`";
      }
      ++k;
    }
  }
  EXPECT_EQ(k, public_runs.size());
  const VerifyResult merged = merge_verifications(a->info(), b->info(), whole.reference, std::move(all), p, options);
  EXPECT_EQ(without_timings(to_json(merged)).dump(1), without_timings(to_json(whole)).dump(1));
}

TEST(Dist, WorldOfOneRunsEverythingAndKeepsErrors) {
  ASSERT_EQ(dist::world().size, 1);
  const dist::Shared s = dist::run_shared({0, 1, 2}, {1, 2, 3}, [](const std::vector<size_t>& mine, dist::Outcome& out,
                                                                   std::string&) {
    for (size_t i : mine) out.results[i] = static_cast<int>(i) * 10;
  });
  ASSERT_EQ(s.results.size(), 3u);
  EXPECT_EQ(s.results.at(2), 20);
  try {
    dist::run_shared({0}, {1}, [](const std::vector<size_t>&, dist::Outcome&, std::string& item) {
      item = "layer 0";
      QC_FAIL_INPUT("bad layer file x.safetensors");
    });
    FAIL() << "the error was swallowed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_STREQ(e.what(), "bad layer file x.safetensors");
  }
}

TEST(ShardedOperands, RoundTripLayerByLayer) {
  TempDir dir;
  const std::vector<LayerOperands> layers = tiny_layers();
  save_operands(dir.file("one.safetensors"), layers, {{"source", "test"}});
  ShardedOperandWriter w(dir.file("ops.index.json"), {{"source", "test"}}, 150 << 10);
  for (const LayerOperands& l : layers) w.add(l);
  w.finish();
  EXPECT_GT(w.shard_count(), 2u);
  const OperandSet one = load_operands(dir.file("one.safetensors"));
  const OperandSet lazy = open_operands(dir.file("ops.index.json"));
  EXPECT_TRUE(lazy.layers.empty()) << "open_operands must not map the shards up front";
  ASSERT_EQ(lazy.size(), one.size());
  EXPECT_EQ(lazy.metadata.at("source"), "test");
  for (size_t i = 0; i < lazy.size(); ++i) {
    const LayerOperands x = lazy.load(i), y = one.load(i);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(lazy.headers[i].m * lazy.headers[i].n * lazy.headers[i].k, y.m * y.n * y.k);
    EXPECT_TRUE(std::equal(x.a_q.begin(), x.a_q.end(), y.a_q.begin(), y.a_q.end())) << x.name;
    EXPECT_TRUE(std::equal(x.w_q.begin(), x.w_q.end(), y.w_q.begin(), y.w_q.end())) << x.name;
    EXPECT_TRUE(std::equal(x.a_scale.begin(), x.a_scale.end(), y.a_scale.begin(), y.a_scale.end())) << x.name;
    EXPECT_TRUE(std::equal(x.w_scale.begin(), x.w_scale.end(), y.w_scale.begin(), y.w_scale.end())) << x.name;
  }
  // load_operands reads a sharded set whole, for the verbs that want every layer at once.
  EXPECT_EQ(load_operands(dir.file("ops.index.json")).layers.size(), layers.size());
}

TEST(ShardedOperands, ChangedOrInconsistentShardsAreInputErrors) {
  TempDir dir;
  const std::vector<LayerOperands> layers = tiny_layers();
  ShardedOperandWriter w(dir.file("ops.index.json"), {}, 150 << 10);
  for (const LayerOperands& l : layers) w.add(l);
  w.finish();
  const std::string index_text = read_file(dir.file("ops.index.json"));
  const nlohmann::json index = nlohmann::json::parse(index_text);

  // A shard changed after the index: found when a layer of it is first loaded, naming the shard.
  const std::string shard = index["weight_map"][layers.back().name + ".w_q"].get<std::string>();
  {
    std::fstream f(dir.file(shard), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 1);
    f.seekp(-1, std::ios::end);
    f.write(&c, 1);
  }
  const OperandSet set = open_operands(dir.file("ops.index.json"));
  EXPECT_NO_THROW(set.load(0));
  try {
    set.load(set.size() - 1);
    FAIL() << "a changed shard was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_NE(std::string(e.what()).find("shard `" + shard + "`"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(index["shards"][shard].get<std::string>()), std::string::npos) << e.what();
  }
  // Read beside the work (verify): the layers load while the digests are read, and `await_sha256` fails on
  // the changed shard with the same words; the shards left unmapped are never read.
  {
    OperandSet beside = open_operands(dir.file("ops.index.json"), true, /*digest_beside=*/true);
    ASSERT_TRUE(beside.await_shards);
    EXPECT_NO_THROW(beside.load(0));
    EXPECT_NO_THROW(beside.load(beside.size() - 1));
    try {
      beside.await_sha256();
      FAIL() << "a changed shard was not found";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find("shard `" + shard + "`"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("the shard changed after the index was written"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(beside.sha256, sha256_file(dir.file("ops.index.json")));  // the index's own digest, read at open
    OperandSet first_only = open_operands(dir.file("ops.index.json"), true, /*digest_beside=*/true);
    const std::string first_shard = index["weight_map"][layers.front().name + ".w_q"].get<std::string>();
    ASSERT_NE(first_shard, shard);
    EXPECT_NO_THROW(first_only.load(0));
    EXPECT_NO_THROW(first_only.await_sha256());  // only the intact shard was mapped
  }

  const auto expect_error = [&](nlohmann::json j, const std::string& fragment) {
    write_file_atomic(dir.file("bad.index.json"), j.dump());
    try {
      open_operands(dir.file("bad.index.json"));
      ADD_FAILURE() << "accepted an index with " << fragment;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  nlohmann::json no_digest = index;
  no_digest["shards"].erase(shard);
  expect_error(no_digest, "expected the digest of shard");
  nlohmann::json split = index;
  const std::string other = index["weight_map"][layers.front().name + ".a_q"].get<std::string>();
  ASSERT_NE(other, shard);
  split["weight_map"][layers.back().name + ".a_scale"] = other;
  expect_error(split, "expected all its tensors in one shard");
  nlohmann::json foreign = index;
  foreign["metadata"]["format"] = "something-else";
  expect_error(foreign, "metadata.format");
  EXPECT_EQ(read_file(dir.file("ops.index.json")), index_text) << "inputs are never modified";
}
