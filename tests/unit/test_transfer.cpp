// Unit tests of src/stats/transfer.hpp: malformed JSONL names file and line; pairing
// errors; sequence-level agreement on fixtures; a synthetic replay with a known margin->flip law
// p(flip | m) = exp(−m/0.5) is recovered (calibration bins within binomial error, AUC CI covers
// the AUC computed by numerical integration).
// Run: ./build/tests/qconform_unit_tests --gtest_filter='Transfer*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "qconform/error.hpp"
#include "stats/stats.hpp"
#include "stats/transfer.hpp"
#include "temp_dir.hpp"

namespace tr = qc::transfer;
namespace st = qc::stats;
namespace fs = std::filesystem;

namespace {

const std::string kData = std::string(QC_SOURCE_DIR) + "/tests/data/transfer/";

std::string write_temp(const std::string& name, const std::string& content) {
  static const qc::test::TempDir dir("transfer");  // removed when the process exits
  fs::path p = dir.file(name);
  std::ofstream(p) << content;
  return p.string();
}

const char* kGood = R"({"prompt": 0, "position": 0, "token": 5, "top1_id": 5, "top1_logit": 3.5, "top2_id": 6, "top2_logit": 1.25, "margin": 2.25})";

std::string rec(const std::string& prompt, int pos, int tok, int t1, int t2, double l1, double l2) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                R"({"prompt": %s, "position": %d, "token": %d, "top1_id": %d, "top1_logit": %.17g, "top2_id": %d, "top2_logit": %.17g})",
                prompt.c_str(), pos, tok, t1, l1, t2, l2);
  return buf;
}

struct BadCase {
  const char* id;
  std::string content;
  int line;            // expected line in the message
  const char* needle;  // expected fragment (field name or reason)
};

}  // namespace

TEST(TransferJsonl, MalformedLinesNameFileLineAndField) {
  const std::string g = kGood;
  const std::vector<BadCase> cases = {
      {"bad-json", g + "\n{\"prompt\": 0, \"position\": 1,\n", 2, "not valid JSON"},
      {"missing-token", g + "\n" + R"({"prompt": 0, "position": 1, "top1_id": 5, "top1_logit": 3.5, "top2_id": 6, "top2_logit": 1.25})", 2, "`token`"},
      {"missing-top2-logit", R"({"prompt": 0, "position": 1, "token": 3, "top1_id": 5, "top1_logit": 3.5, "top2_id": 6})", 1, "`top2_logit`"},
      {"missing-logits", R"({"prompt": 0, "position": 1, "token": 3, "top1_id": 5, "top2_id": 6})", 1, "top1_logit"},
      {"position-string", R"({"prompt": 0, "position": "1", "token": 3, "top1_id": 5, "top1_logit": 3.5, "top2_id": 6, "top2_logit": 1.25})", 1, "`position`: expected an integer"},
      {"token-float", R"({"prompt": 0, "position": 1, "token": 3.0, "top1_id": 5, "top1_logit": 3.5, "top2_id": 6, "top2_logit": 1.25})", 1, "`token`: expected an integer"},
      {"prompt-float", R"({"prompt": 0.5, "position": 1, "token": 3, "top1_id": 5, "top1_logit": 3.5, "top2_id": 6, "top2_logit": 1.25})", 1, "`prompt`"},
      {"logit-string", R"({"prompt": 0, "position": 1, "token": 3, "top1_id": 5, "top1_logit": "3.5", "top2_id": 6, "top2_logit": 1.25})", 1, "`top1_logit`: expected a number"},
      {"nan-logit", g + "\n" + R"({"prompt": 0, "position": 1, "token": 3, "top1_id": 5, "top1_logit": NaN, "top2_id": 6, "top2_logit": 1.25})", 2, "`top1_logit`: expected a finite number, found NaN"},
      {"inf-logit", R"({"prompt": 0, "position": 1, "token": 3, "top1_id": 5, "top1_logit": 3.5, "top2_id": 6, "top2_logit": -Infinity})", 1, "`top2_logit`: expected a finite number"},
      {"overflow-logit", R"({"prompt": 0, "position": 1, "token": 3, "top1_id": 5, "top1_logit": 1e999, "top2_id": 6, "top2_logit": 1})", 1, "`top1_logit`: expected a finite number"},
      {"nan-logprob", R"({"prompt": 0, "position": 1, "token": 3, "top1_id": 5, "top1_logprob": nan, "top2_id": 6, "top2_logprob": -1})", 1, "`top1_logprob`"},
      {"duplicate", g + "\n" + g, 2, "duplicate record for prompt 0 position 0 (first at line 1)"},
      {"margin-mismatch", R"({"prompt": 0, "position": 1, "token": 3, "top1_id": 5, "top1_logit": 3.5, "top2_id": 6, "top2_logit": 1.25, "margin": 2.3})", 1, "`margin`"},
      {"top2-above-top1", R"({"prompt": 0, "position": 1, "token": 3, "top1_id": 5, "top1_logit": 1.0, "top2_id": 6, "top2_logit": 1.25})", 1, "must not be below"},
      {"same-ids", R"({"prompt": 0, "position": 1, "token": 3, "top1_id": 5, "top1_logit": 3.5, "top2_id": 5, "top2_logit": 1.25})", 1, "two different tokens"},
      {"header-after-record", g + "\n{\"kind\": \"header\", \"mode\": \"replay\"}", 2, "header object after the first record"},
      {"unknown-kind", "{\"kind\": \"footer\"}", 1, "`kind`"},
      {"bad-mode", "{\"kind\": \"header\", \"mode\": \"sample\"}\n" + g, 1, "`mode`"},
      {"not-object", "[1, 2]", 1, "expected a JSON object"},
  };
  for (const BadCase& c : cases) {
    const std::string path = write_temp(std::string(c.id) + ".jsonl", c.content);
    try {
      tr::read_transfer_jsonl(path);
      ADD_FAILURE() << c.id << ": no error for\n" << c.content;
    } catch (const qc::Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.kind(), qc::ErrorKind::input) << c.id << ": " << msg;
      const std::string at = path + ":" + std::to_string(c.line) + ":";
      EXPECT_EQ(msg.rfind(at, 0), 0u) << c.id << ": message does not start with `" << at << "`: " << msg;
      EXPECT_NE(msg.find(c.needle), std::string::npos) << c.id << ": `" << c.needle << "` missing from: " << msg;
    }
  }
  // An empty file names the file.
  const std::string empty = write_temp("empty.jsonl", "\n\n");
  EXPECT_THROW(tr::read_transfer_jsonl(empty), qc::Error);
}

TEST(TransferJsonl, AcceptsLogprobsHeadersMarginAndStringPrompts) {
  std::istringstream in(std::string("{\"kind\": \"header\", \"arm\": \"x\", \"mode\": \"replay\"}\n") +
                        R"({"prompt": "a b", "position": 3, "token": 1, "top1_id": 1, "top1_logprob": -0.25, "top2_id": 2, "top2_logprob": -1.75, "margin": 1.5})" + "\n" +
                        R"({"prompt": 7, "position": 3, "token": 1, "top1_id": 1, "top1_logit": 10.000001, "top2_id": 2, "top2_logit": 9.5, "margin": 0.50000095})" + "\r\n");
  tr::TransferFile f = tr::parse_transfer_jsonl(in, "mem.jsonl");
  ASSERT_EQ(f.records.size(), 2u);
  EXPECT_EQ(f.mode, "replay");
  EXPECT_EQ(f.headers.size(), 1u);
  EXPECT_EQ(f.values, "mixed");
  EXPECT_EQ(f.prompts[0], "\"a b\"");
  EXPECT_EQ(f.prompts[1], "7");
  EXPECT_EQ(f.records[0].margin, 1.5);
  EXPECT_EQ(f.records[1].margin, 0.50000095);  // the declared margin is used
}

TEST(TransferPairing, MismatchedPromptsPositionsTokensAndModes) {
  const std::string a = write_temp("pa.jsonl", rec("0", 0, 1, 1, 2, 2, 1) + "\n" + rec("0", 1, 1, 1, 2, 2, 1) + "\n" +
                                                   rec("1", 0, 1, 1, 2, 2, 1) + "\n");
  const std::string b_prompt = write_temp("pb_prompt.jsonl", rec("0", 0, 1, 1, 2, 2, 1) + "\n" + rec("0", 1, 1, 1, 2, 2, 1) +
                                                                 "\n" + rec("\"1\"", 0, 1, 1, 2, 2, 1) + "\n");
  const std::string b_len = write_temp("pb_len.jsonl", rec("0", 0, 1, 1, 2, 2, 1) + "\n" + rec("1", 0, 1, 1, 2, 2, 1) + "\n");
  const std::string b_tok = write_temp("pb_tok.jsonl", rec("0", 0, 1, 1, 2, 2, 1) + "\n" + rec("0", 1, 9, 1, 2, 2, 1) + "\n" +
                                                           rec("1", 0, 1, 1, 2, 2, 1) + "\n");
  const std::string b_gap = write_temp("pb_gap.jsonl", rec("0", 0, 1, 1, 2, 2, 1) + "\n" + rec("0", 2, 1, 1, 2, 2, 1) + "\n" +
                                                           rec("1", 0, 1, 1, 2, 2, 1) + "\n");
  const std::string b_mode = write_temp("pb_mode.jsonl", "{\"kind\": \"header\", \"mode\": \"replay\"}\n" +
                                                             rec("0", 0, 1, 1, 2, 2, 1) + "\n" + rec("0", 1, 1, 1, 2, 2, 1) +
                                                             "\n" + rec("1", 0, 1, 1, 2, 2, 1) + "\n");
  struct C {
    std::string b;
    bool replay;
    std::string needle;
  };
  const std::vector<C> cases = {
      {b_prompt, true, a + ":3: prompt 1 does not appear in " + b_prompt},
      {b_prompt, false, a + ":3: prompt 1 does not appear in " + b_prompt},
      {b_len, true, a + ":2: prompt 0 position 1 has no counterpart in " + b_len},
      {b_tok, true, a + ":2 and " + b_tok + ":2: prompt 0 position 1: forced token 1 in A but 9 in B"},
      {b_gap, false, b_gap + ":2: prompt 0 position 2 follows position 0"},
      {b_mode, false, b_mode + ": header field `mode` is \"replay\""},
  };
  tr::TransferFile fa = tr::read_transfer_jsonl(a);
  for (const C& c : cases) {
    tr::TransferOptions opt;
    opt.replay = c.replay;
    opt.bootstrap = 10;
    try {
      tr::analyze_transfer(fa, tr::read_transfer_jsonl(c.b), opt);
      ADD_FAILURE() << "no error for " << c.b << " replay=" << c.replay;
    } catch (const qc::Error& e) {
      EXPECT_EQ(e.kind(), qc::ErrorKind::input);
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << "expected `" << c.needle << "` in: " << e.what();
    }
  }
}

TEST(TransferSequence, FixtureDivergences) {
  tr::TransferOptions opt;
  auto r = tr::analyze_transfer(tr::read_transfer_jsonl(kData + "gen_a.jsonl"), tr::read_transfer_jsonl(kData + "gen_b.jsonl"), opt);
  ASSERT_TRUE(r.sequence);
  const auto& s = *r.sequence;
  ASSERT_EQ(s.n_prompts, 3u);
  EXPECT_EQ(s.n_identical, 1u);
  // Fixture facts (tests/data/transfer): p0 identical; p1 differs from position 7 on (starts at
  // 4); prompt 2 starts at 3 and B stops after 8 of A's 10 tokens.
  EXPECT_TRUE(s.rows[0].identical);
  EXPECT_FALSE(s.rows[0].first_divergence_position.has_value());
  EXPECT_EQ(s.rows[1].first_divergence_position.value_or(-1), 7);
  EXPECT_EQ(s.rows[1].tokens_until_divergence, 3u);
  EXPECT_EQ(s.rows[2].prompt, "2");
  EXPECT_EQ(s.rows[2].len_b, 8u);
  EXPECT_EQ(s.rows[2].first_divergence_position.value_or(-1), 11);
  EXPECT_EQ(s.rows[2].tokens_until_divergence, 8u);
  EXPECT_DOUBLE_EQ(s.mean_tokens_until_divergence, 5.5);
  auto j = tr::to_json(r);
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["inputs"]["a"]["headers"][0]["arm"], "cpu:reference");
}

namespace {

// Analytic AUC for margins m ~ U(0, L) and p(flip | m) = exp(−m/tau): positives have density
// ∝ p(m), negatives ∝ 1 − p(m); AUC = P(m_pos < m_neg) = ∫ f1(m) S0(m) dm, by the midpoint rule.
double analytic_auc(double L, double tau) {
  const int N = 200000;
  const double h = L / N;
  std::vector<double> f1(N), f0(N);
  double z1 = 0, z0 = 0;
  for (int i = 0; i < N; ++i) {
    double m = (i + 0.5) * h, p = std::exp(-m / tau);
    f1[i] = p * h;
    f0[i] = (1 - p) * h;
    z1 += f1[i];
    z0 += f0[i];
  }
  double auc = 0, s0 = z0;  // s0 = negative mass at or above cell i
  for (int i = 0; i < N; ++i) {
    s0 -= f0[i];
    auc += f1[i] * (s0 + 0.5 * f0[i]);  // same-cell pairs split evenly
  }
  return auc / (z1 * z0);
}

}  // namespace

TEST(TransferReplay, SyntheticMarginLawIsRecovered) {
  const double L = 3.0, tau = 0.5;
  const int G = 64, P = 100;
  st::Rng rng = st::make_rng(2024);
  auto unif = [&] { return static_cast<double>(rng() >> 11) * 0x1p-53; };
  std::string a, b;
  std::vector<double> margins;
  for (int g = 0; g < G; ++g) {
    for (int k = 0; k < P; ++k) {
      double m = L * unif();
      margins.push_back(m);
      bool flip = unif() < std::exp(-m / tau);
      double l1 = 8.0 + unif();
      a += rec(std::to_string(g), k, 7, 100, 200, l1, l1 - m) + "\n";
      b += rec(std::to_string(g), k, 7, flip ? 200 : 100, flip ? 100 : 200, l1, l1 - m * 0.5) + "\n";
    }
  }
  tr::TransferOptions opt;
  opt.replay = true;
  opt.min_bin_support = 200;
  auto r = tr::analyze_transfer(tr::read_transfer_jsonl(write_temp("law_a.jsonl", a)),
                                tr::read_transfer_jsonl(write_temp("law_b.jsonl", b)), opt);
  ASSERT_TRUE(r.replay);
  const tr::ReplayResult& p = *r.replay;
  ASSERT_EQ(p.n_positions, static_cast<std::size_t>(G * P));

  // Prevalence: π = (tau/L)(1 − e^{−L/tau}); binomial error on n positions.
  const double pi = tau / L * (1 - std::exp(-L / tau));
  const double se_pi = std::sqrt(pi * (1 - pi) / (G * P));
  EXPECT_NEAR(p.flip_rate, pi, 4 * se_pi) << "flip rate vs analytic prevalence";

  // AUC: the analytic value must lie inside the bootstrap CI.
  const double auc_true = analytic_auc(L, tau);
  ASSERT_TRUE(std::isfinite(p.auc) && std::isfinite(p.auc_ci.lo) && std::isfinite(p.auc_ci.hi));
  EXPECT_LE(p.auc_ci.lo, auc_true) << "AUC " << p.auc << " CI [" << p.auc_ci.lo << ", " << p.auc_ci.hi << "]";
  EXPECT_GE(p.auc_ci.hi, auc_true) << "AUC " << p.auc << " CI [" << p.auc_ci.lo << ", " << p.auc_ci.hi << "]";
  EXPECT_LT(p.auc_ci.hi - p.auc_ci.lo, 0.08);
  EXPECT_EQ(p.auc_ci.n_valid, opt.bootstrap);

  tr::TransferFile fa = tr::read_transfer_jsonl(write_temp("law_a.jsonl", a));
  tr::TransferFile fb = tr::read_transfer_jsonl(write_temp("law_b.jsonl", b));
  // Calibration: each bin's flip rate within 3.5 binomial standard errors of the law averaged
  // over the bin's own margins.
  ASSERT_GE(p.calibration.size(), 5u);
  for (const tr::CalibrationBin& c : p.calibration) {
    double sum = 0;
    std::size_t n = 0;
    for (const tr::PositionRecord& rec_a : fa.records) {
      const double m = rec_a.margin;  // what the analysis saw: l1 − (l1 − m) in fp64
      if (m >= c.lo && m < c.hi) {
        sum += std::exp(-m / tau);
        ++n;
      }
    }
    ASSERT_EQ(n, c.support) << "bin [" << c.lo << ", " << c.hi << ")";
    const double pbar = sum / n, se = std::sqrt(pbar * (1 - pbar) / n);
    EXPECT_GE(c.support, opt.min_bin_support);
    EXPECT_NEAR(c.rate, pbar, 3.5 * se) << "bin [" << c.lo << ", " << c.hi << ") support " << c.support;
    EXPECT_NEAR(c.p, (c.flips + 1.0) / (c.support + 2.0), 1e-15);
    EXPECT_TRUE(c.p_lo <= c.p && c.p <= c.p_hi);
  }
  for (std::size_t i = 1; i < p.isotonic.size(); ++i) EXPECT_LT(p.isotonic[i].p, p.isotonic[i - 1].p);

  // Held-out Brier: the map beats the constant baseline, and the baseline is recomputed here
  // from the recorded fold assignment (a second computation of the same quantity).
  ASSERT_TRUE(p.brier.computed);
  EXPECT_EQ(p.brier.folds, 5u);
  EXPECT_EQ(p.brier.seed, opt.seed + 1);
  EXPECT_LT(p.brier.model, p.brier.baseline);
  EXPECT_LT(p.brier.isotonic, p.brier.baseline);
  std::vector<int> flips(fa.records.size());
  for (std::size_t i = 0; i < fa.records.size(); ++i) flips[i] = fa.records[i].top1_id != fb.records[i].top1_id;
  double se_sum = 0;
  for (std::size_t f = 0; f < 5; ++f) {
    double k = 0, n = 0;
    for (std::size_t i = 0; i < flips.size(); ++i) {
      if (p.brier.fold_of_prompt[i / P] != f) {
        k += flips[i];
        n += 1;
      }
    }
    for (std::size_t i = 0; i < flips.size(); ++i) {
      if (p.brier.fold_of_prompt[i / P] == f) se_sum += (flips[i] - k / n) * (flips[i] - k / n);
    }
  }
  EXPECT_NEAR(p.brier.baseline, se_sum / flips.size(), 1e-12);
  // The oracle (true law) Brier on the same positions is a yardstick the map should approach.
  double oracle = 0;
  for (std::size_t i = 0; i < flips.size(); ++i) {
    double q = std::exp(-margins[i] / tau);
    oracle += (flips[i] - q) * (flips[i] - q);
  }
  oracle /= flips.size();
  EXPECT_LT(p.brier.model - oracle, 0.01) << "model " << p.brier.model << " oracle " << oracle;

  // Leave-one-prompt-out: recompute the largest |ΔAUC| by filtering the data.
  double max_abs = 0;
  std::string which;
  for (int g = 0; g < G; ++g) {
    std::vector<int> y;
    std::vector<double> s;
    for (std::size_t i = 0; i < flips.size(); ++i) {
      if (static_cast<int>(i / P) != g) {
        y.push_back(flips[i]);
        s.push_back(-fa.records[i].margin);
      }
    }
    double d = std::abs(st::roc_auc(y, s) - p.auc);
    if (d > max_abs) {
      max_abs = d;
      which = std::to_string(g);
    }
  }
  EXPECT_NEAR(p.lopo_max_abs_delta, max_abs, 1e-12);
  EXPECT_EQ(p.lopo_prompt, which);

  // Same seed, same numbers; the JSON records the seeds.
  auto again = tr::analyze_transfer(fa, fb, opt);
  EXPECT_EQ(again.replay->auc_ci.lo, p.auc_ci.lo);
  EXPECT_EQ(again.replay->brier.model, p.brier.model);
  auto j = tr::to_json(r);
  EXPECT_EQ(j["options"]["seed_bootstrap"], opt.seed);
  EXPECT_EQ(j["options"]["seed_folds"], opt.seed + 1);
  EXPECT_EQ(j["replay"]["roc_auc"]["seed"], opt.seed);
  std::printf("synthetic law: flip rate %.4f (analytic %.4f), AUC %.4f CI [%.4f, %.4f] (analytic %.4f), "
              "Brier model %.5f baseline %.5f oracle %.5f\n",
              p.flip_rate, pi, p.auc, p.auc_ci.lo, p.auc_ci.hi, auc_true, p.brier.model, p.brier.baseline, oracle);
}
