// Token transfer analysis (check C7): JSONL reading and validation, sequence-level agreement,
// teacher-forced flips versus the reference margin, calibration and held-out Brier scores.
// Declared in src/stats/transfer.hpp; estimators in stats.cpp; docs/statistics.md.
// Test: ./build/tests/qconform_unit_tests --gtest_filter='Transfer*'
#include "stats/transfer.hpp"

#include "core/fileio.hpp"
#include "core/limits.hpp"
#include "core/results_json.hpp"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <regex>
#include <sstream>
#include <unordered_map>

#include "qconform/error.hpp"

namespace qc::transfer {

using nlohmann::json;

namespace {

// The margin a file declares must equal top1 − top2 "within fp32 rounding": both operands and
// the difference were fp32 values printed with at least fp32 round-trip precision, so we allow
// 8 half-ulps (2^-21) relative to the larger operand. Anything further off is a different
// quantity, not rounding.
constexpr double kMarginRelTol = 0x1p-21;

std::string where(const std::string& name, std::size_t line) { return name + ":" + std::to_string(line); }

std::string describe(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return std::string(v.type_name()) + " " + s;
}

std::int64_t get_int(const json& obj, const char* key, const std::string& at) {
  QC_INPUT(obj.contains(key), "{}: missing field `{}` (expected an integer)", at, key);
  const json& v = obj.at(key);
  QC_INPUT(v.is_number_integer(), "{}: field `{}`: expected an integer, found {}", at, key, describe(v));
  if (v.is_number_unsigned()) {
    QC_INPUT(v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX), "{}: field `{}`: integer {} too large",
             at, key, v.dump());
  }
  return v.get<std::int64_t>();
}

double get_number(const json& obj, const char* key, const std::string& at) {
  const json& v = obj.at(key);
  QC_INPUT(v.is_number(), "{}: field `{}`: expected a number, found {}", at, key, describe(v));
  double d = v.get<double>();
  QC_INPUT(std::isfinite(d), "{}: field `{}`: expected a finite number, found {}", at, key, v.dump());
  return d;
}

// nlohmann rejects NaN/Infinity literals with a generic parse error; name the field instead.
void check_nonfinite_literals(const std::string& text, const std::string& at) {
  static const std::regex kNonFinite(R"re("([A-Za-z0-9_]+)"\s*:\s*(-?(NaN|nan|Infinity|infinity|inf|Inf)))re");
  static const std::regex kNumber(R"re("([A-Za-z0-9_]+)"\s*:\s*(-?[0-9.]+[eE][+]?[0-9]+))re");
  std::smatch m;
  if (std::regex_search(text, m, kNonFinite)) {
    QC_FAIL_INPUT("{}: field `{}`: expected a finite number, found {}", at, m[1].str(), m[2].str());
  }
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kNumber); it != std::sregex_iterator(); ++it) {
    if (std::isinf(std::strtod((*it)[2].str().c_str(), nullptr))) {
      QC_FAIL_INPUT("{}: field `{}`: expected a finite number, found {} (overflows a double)", at, (*it)[1].str(),
                    (*it)[2].str());
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reading

TransferFile parse_transfer_jsonl(std::istream& in, const std::string& name) {
  TransferFile file;
  file.path = name;
  std::unordered_map<std::string, std::size_t> prompt_index;
  std::map<std::pair<std::size_t, std::int64_t>, std::size_t> seen;  // (prompt, position) -> line
  bool any_logits = false, any_logprobs = false;
  std::string text;
  std::size_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines carry nothing
    const std::string at = where(name, line);
    check_json_depth(text, at);  // a deeply nested line must not exhaust the stack later
    json obj;
    try {
      obj = json::parse(text);
    } catch (const json::exception& e) {
      // Parse errors and number overflow (id 406, e.g. 1e999) both land here.
      check_nonfinite_literals(text, at);
      QC_FAIL_INPUT("{}: not valid JSON ({})", at, e.what());
    }
    QC_INPUT(obj.is_object(), "{}: expected a JSON object per line, found {}", at, describe(obj));

    if (obj.contains("kind")) {
      QC_INPUT(obj["kind"] == "header", "{}: field `kind`: expected \"header\" (records have no `kind`), found {}", at,
               obj["kind"].dump());
      QC_INPUT(file.records.empty(), "{}: header object after the first record (headers must come first)", at);
      if (obj.contains("mode")) {
        const json& mode = obj["mode"];
        QC_INPUT(mode == "generate" || mode == "replay",
                 "{}: header field `mode`: expected \"generate\" or \"replay\", found {}", at, mode.dump());
        QC_INPUT(file.mode.empty() || file.mode == mode.get<std::string>(),
                 "{}: header field `mode`: {} contradicts the earlier header's \"{}\"", at, mode.dump(), file.mode);
        file.mode = mode.get<std::string>();
      }
      file.headers.push_back(std::move(obj));
      continue;
    }

    PositionRecord r;
    r.line = line;
    QC_INPUT(obj.contains("prompt"), "{}: missing field `prompt` (expected a string or an integer)", at);
    const json& p = obj["prompt"];
    QC_INPUT(p.is_string() || p.is_number_integer(), "{}: field `prompt`: expected a string or an integer, found {}",
             at, describe(p));
    auto [it, inserted] = prompt_index.try_emplace(p.dump(), file.prompts.size());
    if (inserted) file.prompts.push_back(p.dump());
    r.prompt = it->second;
    r.position = get_int(obj, "position", at);
    QC_INPUT(r.position >= 0, "{}: field `position`: expected an integer >= 0, found {}", at, r.position);
    r.token = get_int(obj, "token", at);
    r.top1_id = get_int(obj, "top1_id", at);
    r.top2_id = get_int(obj, "top2_id", at);
    QC_INPUT(r.token >= 0 && r.top1_id >= 0 && r.top2_id >= 0,
             "{}: fields `token`, `top1_id`, `top2_id`: expected token ids >= 0, found {}, {}, {}", at, r.token,
             r.top1_id, r.top2_id);
    QC_INPUT(r.top1_id != r.top2_id, "{}: fields `top1_id` and `top2_id`: expected two different tokens, found {} twice",
             at, r.top1_id);

    const bool logits = obj.contains("top1_logit") || obj.contains("top2_logit");
    const bool logprobs = obj.contains("top1_logprob") || obj.contains("top2_logprob");
    const char* k1 = logits ? "top1_logit" : "top1_logprob";
    const char* k2 = logits ? "top2_logit" : "top2_logprob";
    QC_INPUT(logits || logprobs, "{}: missing fields `top1_logit`/`top2_logit` (or `top1_logprob`/`top2_logprob`)", at);
    QC_INPUT(obj.contains(k1) && obj.contains(k2), "{}: missing field `{}` (its pair `{}` is present)", at,
             obj.contains(k1) ? k2 : k1, obj.contains(k1) ? k1 : k2);
    any_logits |= logits;
    any_logprobs |= !logits;
    r.top1 = get_number(obj, k1, at);
    r.top2 = get_number(obj, k2, at);
    const double diff = r.top1 - r.top2;
    QC_INPUT(diff >= 0.0, "{}: fields `{}` {} < `{}` {}: the top-1 value must not be below the top-2 value", at, k1,
             r.top1, k2, r.top2);
    if (obj.contains("margin")) {
      r.margin = get_number(obj, "margin", at);
      const double tol = kMarginRelTol * std::max({std::abs(r.top1), std::abs(r.top2), std::abs(r.margin)});
      QC_INPUT(std::abs(r.margin - diff) <= tol,
               "{}: field `margin`: expected `{}` − `{}` = {:.9g} (within fp32 rounding, ±{:.3g}), found {:.9g}", at,
               k1, k2, diff, tol, r.margin);
      QC_INPUT(r.margin >= 0.0, "{}: field `margin`: expected >= 0, found {}", at, r.margin);
    } else {
      r.margin = diff;
    }

    auto [dup, fresh] = seen.try_emplace({r.prompt, r.position}, line);
    QC_INPUT(fresh, "{}: duplicate record for prompt {} position {} (first at line {})", at, p.dump(), r.position,
             dup->second);
    file.records.push_back(r);
  }
  QC_INPUT(!in.bad(), "{}: read error", name);
  QC_INPUT(!file.records.empty(), "{}: no position records (expected one JSON object per position)", name);
  file.values = any_logits && any_logprobs ? "mixed" : any_logits ? "logits" : "logprobs";
  return file;
}

TransferFile read_transfer_jsonl(const std::string& path) {
  std::istringstream in(read_file(path));  // read_file refuses FIFOs, devices and directories without blocking
  return parse_transfer_jsonl(in, path);
}

// ---------------------------------------------------------------------------------------------
// Analysis

namespace {

// Records of one file grouped by prompt (indexed like `TransferFile::prompts`), sorted by position.
std::vector<std::vector<const PositionRecord*>> by_prompt(const TransferFile& f) {
  std::vector<std::vector<const PositionRecord*>> g(f.prompts.size());
  for (const PositionRecord& r : f.records) g[r.prompt].push_back(&r);
  for (auto& v : g) {
    std::sort(v.begin(), v.end(), [](const PositionRecord* x, const PositionRecord* y) { return x->position < y->position; });
  }
  return g;
}

std::string prompt_display(const std::string& json_text) {
  json p = json::parse(json_text);
  return p.is_string() ? p.get<std::string>() : json_text;
}

// For each prompt of A, the index of the same prompt in B; both files must hold the same set.
std::vector<std::size_t> pair_prompts(const TransferFile& a, const TransferFile& b,
                                      const std::vector<std::vector<const PositionRecord*>>& ga,
                                      const std::vector<std::vector<const PositionRecord*>>& gb) {
  std::unordered_map<std::string, std::size_t> in_b;
  for (std::size_t j = 0; j < b.prompts.size(); ++j) in_b.emplace(b.prompts[j], j);
  std::vector<std::size_t> match(a.prompts.size());
  std::vector<bool> used(b.prompts.size(), false);
  for (std::size_t i = 0; i < a.prompts.size(); ++i) {
    auto it = in_b.find(a.prompts[i]);
    QC_INPUT(it != in_b.end(), "{}: prompt {} does not appear in {} (both arms must cover the same prompts)",
             where(a.path, ga[i].front()->line), a.prompts[i], b.path);
    match[i] = it->second;
    used[it->second] = true;
  }
  for (std::size_t j = 0; j < b.prompts.size(); ++j) {
    QC_INPUT(used[j], "{}: prompt {} does not appear in {} (both arms must cover the same prompts)",
             where(b.path, gb[j].front()->line), b.prompts[j], a.path);
  }
  return match;
}

void check_mode(const TransferFile& f, bool replay) {
  const char* want = replay ? "replay" : "generate";
  QC_INPUT(f.mode.empty() || f.mode == want,
           "{}: header field `mode` is \"{}\" but the analysis runs in {} mode ({} `--replay`)", f.path, f.mode, want,
           replay ? "drop" : "add");
}

SequenceResult analyze_sequences(const TransferFile& a, const TransferFile& b) {
  auto ga = by_prompt(a), gb = by_prompt(b);
  auto match = pair_prompts(a, b, ga, gb);
  // A generated sequence must be contiguous: a gap would make "first divergence" ill-defined.
  for (const auto* f : {&a, &b}) {
    const auto& g = f == &a ? ga : gb;
    for (std::size_t p = 0; p < g.size(); ++p) {
      for (std::size_t k = 1; k < g[p].size(); ++k) {
        QC_INPUT(g[p][k]->position == g[p][k - 1]->position + 1,
                 "{}: prompt {} position {} follows position {} (a generated sequence needs contiguous positions)",
                 where(f->path, g[p][k]->line), f->prompts[p], g[p][k]->position, g[p][k - 1]->position);
      }
    }
  }
  SequenceResult res;
  double sum_until = 0.0;
  std::size_t n_diverged = 0;
  for (std::size_t i = 0; i < ga.size(); ++i) {
    const auto& sa = ga[i];
    const auto& sb = gb[match[i]];
    QC_INPUT(sa.front()->position == sb.front()->position,
             "{} and {}: prompt {} starts at position {} in A but {} in B (same prompt, same prompt length expected)",
             where(a.path, sa.front()->line), where(b.path, sb.front()->line), a.prompts[i], sa.front()->position,
             sb.front()->position);
    SequenceRow row;
    row.prompt = prompt_display(a.prompts[i]);
    row.len_a = sa.size();
    row.len_b = sb.size();
    std::size_t k = 0;
    while (k < sa.size() && k < sb.size() && sa[k]->token == sb[k]->token) ++k;
    row.tokens_until_divergence = k;
    row.identical = k == sa.size() && k == sb.size();
    if (!row.identical) {
      // Divergence at the first differing token, or where the shorter sequence ends.
      row.first_divergence_position = sa.front()->position + static_cast<std::int64_t>(k);
      sum_until += static_cast<double>(k);
      ++n_diverged;
    }
    res.n_identical += row.identical;
    res.rows.push_back(std::move(row));
  }
  res.n_prompts = res.rows.size();
  if (n_diverged > 0) res.mean_tokens_until_divergence = sum_until / static_cast<double>(n_diverged);
  return res;
}

// The calibrated map: merged quantile bins of the margin, Beta(1,1)-smoothed flip rate per bin.
struct BinMap {
  stats::Bins bins;
  std::vector<std::size_t> flips;
  double predict(double margin) const {
    std::size_t b = bins.bin_of(margin);
    return (static_cast<double>(flips[b]) + 1.0) / (static_cast<double>(bins.support[b]) + 2.0);
  }
};

BinMap fit_bin_map(std::span<const double> margin, std::span<const int> flip, const TransferOptions& opt) {
  BinMap m;
  m.bins = stats::quantile_bins_merged(margin, opt.initial_bins, opt.min_bin_support);
  m.flips.assign(m.bins.support.size(), 0);
  for (std::size_t i = 0; i < margin.size(); ++i) m.flips[m.bins.bin_of(margin[i])] += flip[i];
  return m;
}

// The positions of both files paired: same positions and the same forced token at each (QC_INPUT
// naming the file, line, prompt and position otherwise); each prompt's row of `res`.
struct PairedPositions {
  std::vector<double> margin;
  std::vector<int> flip;
  std::vector<std::int64_t> cluster;  // the prompt of each position
};
PairedPositions pair_positions(const TransferFile& a, const TransferFile& b, ReplayResult& res) {
  auto ga = by_prompt(a), gb = by_prompt(b);
  auto match = pair_prompts(a, b, ga, gb);
  PairedPositions pp;
  std::vector<double>& margin = pp.margin;
  std::vector<int>& flip = pp.flip;
  std::vector<std::int64_t>& cluster = pp.cluster;
  res.n_prompts = ga.size();
  for (std::size_t i = 0; i < ga.size(); ++i) {
    const auto& sa = ga[i];
    const auto& sb = gb[match[i]];
    PromptReplayRow row;
    row.prompt = prompt_display(a.prompts[i]);
    std::size_t ka = 0, kb = 0;
    while (ka < sa.size() || kb < sb.size()) {
      if (kb == sb.size() || (ka < sa.size() && sa[ka]->position < sb[kb]->position)) {
        QC_FAIL_INPUT("{}: prompt {} position {} has no counterpart in {} (replay needs the same positions in both "
                      "files; A has {} positions for this prompt, B has {})",
                      where(a.path, sa[ka]->line), a.prompts[i], sa[ka]->position, b.path, sa.size(), sb.size());
      }
      if (ka == sa.size() || sb[kb]->position < sa[ka]->position) {
        QC_FAIL_INPUT("{}: prompt {} position {} has no counterpart in {} (replay needs the same positions in both "
                      "files; A has {} positions for this prompt, B has {})",
                      where(b.path, sb[kb]->line), b.prompts[match[i]], sb[kb]->position, a.path, sa.size(), sb.size());
      }
      const PositionRecord& ra = *sa[ka++];
      const PositionRecord& rb = *sb[kb++];
      QC_INPUT(ra.token == rb.token,
               "{} and {}: prompt {} position {}: forced token {} in A but {} in B (replay scores the same forced "
               "tokens in both arms)",
               where(a.path, ra.line), where(b.path, rb.line), a.prompts[i], ra.position, ra.token, rb.token);
      const int f = ra.top1_id != rb.top1_id ? 1 : 0;
      margin.push_back(ra.margin);
      flip.push_back(f);
      cluster.push_back(static_cast<std::int64_t>(i));
      ++row.n_positions;
      row.n_flips += f;
      if (f && !row.first_flip_position) row.first_flip_position = ra.position;
    }
    res.prompts.push_back(std::move(row));
  }
  return pp;
}

// Calibration on all positions: margin bins with their flip rates (Beta(1,1) intervals) and the
// decreasing isotonic fit.
void calibrate(ReplayResult& res, const std::vector<double>& margin, const std::vector<int>& flip,
               const TransferOptions& opt) {
  BinMap map = fit_bin_map(margin, flip, opt);
  for (std::size_t bi = 0; bi < map.bins.support.size(); ++bi) {
    CalibrationBin cb;
    cb.lo = bi == 0 ? -INFINITY : map.bins.edges[bi - 1];
    cb.hi = bi == map.bins.edges.size() ? INFINITY : map.bins.edges[bi];
    cb.x_min = map.bins.x_min[bi];
    cb.x_max = map.bins.x_max[bi];
    cb.support = map.bins.support[bi];
    cb.flips = map.flips[bi];
    cb.rate = static_cast<double>(cb.flips) / static_cast<double>(cb.support);
    auto s = stats::beta11_rate(static_cast<double>(cb.flips), static_cast<double>(cb.support), opt.ci_level);
    cb.p = s.p;
    cb.p_lo = s.lo;
    cb.p_hi = s.hi;
    res.calibration.push_back(cb);
  }
  std::vector<double> flip_d(flip.begin(), flip.end());
  stats::IsotonicFit iso = stats::isotonic_fit_decreasing(margin, flip_d);
  for (std::size_t j = 0; j < iso.x.size(); ++j) {
    if (j == 0 || iso.y[j] != iso.y[j - 1]) res.isotonic.push_back({iso.x[j], iso.x[j], iso.y[j], 0.0});
    res.isotonic.back().x_hi = iso.x[j];
    res.isotonic.back().weight += iso.weight[j];
  }

}

// Held-out Brier: K folds over prompts from a seeded permutation; the prompt at permuted rank r goes
// to fold r mod K.
void heldout_brier(ReplayResult& res, const PairedPositions& pp, const TransferOptions& opt) {
  const std::vector<double>& margin = pp.margin;
  const std::vector<int>& flip = pp.flip;
  const std::vector<std::int64_t>& cluster = pp.cluster;
  const std::size_t n = margin.size();
  BrierResult& br = res.brier;
  br.seed = opt.seed + 1;
  const std::size_t G = res.prompts.size();
  const std::size_t K = std::min(opt.folds, G);
  if (K >= 2) {
    br.computed = true;
    br.folds = K;
    stats::Rng rng = stats::make_rng(br.seed);
    std::vector<std::size_t> perm = stats::random_permutation(rng, G);
    br.fold_of_prompt.assign(G, 0);
    for (std::size_t r = 0; r < G; ++r) br.fold_of_prompt[perm[r]] = r % K;
    std::vector<int> y_out;
    std::vector<double> p_model, p_base, p_iso;
    for (std::size_t f = 0; f < K; ++f) {
      std::vector<double> m_tr, y_tr;
      std::vector<int> f_tr;
      for (std::size_t i = 0; i < n; ++i) {
        if (br.fold_of_prompt[static_cast<std::size_t>(cluster[i])] != f) {
          m_tr.push_back(margin[i]);
          f_tr.push_back(flip[i]);
          y_tr.push_back(flip[i]);
        }
      }
      BinMap fm = fit_bin_map(m_tr, f_tr, opt);
      stats::IsotonicFit fi = stats::isotonic_fit_decreasing(m_tr, y_tr);
      const double prevalence = std::accumulate(y_tr.begin(), y_tr.end(), 0.0) / static_cast<double>(y_tr.size());
      for (std::size_t i = 0; i < n; ++i) {
        if (br.fold_of_prompt[static_cast<std::size_t>(cluster[i])] == f) {
          y_out.push_back(flip[i]);
          p_model.push_back(fm.predict(margin[i]));
          p_base.push_back(prevalence);
          p_iso.push_back(fi.predict(margin[i]));
        }
      }
    }
    br.n_heldout = y_out.size();
    br.model = stats::brier_score(y_out, p_model);
    br.baseline = stats::brier_score(y_out, p_base);
    br.isotonic = stats::brier_score(y_out, p_iso);
    br.skill = br.baseline > 0.0 ? 1.0 - br.model / br.baseline : kNaN;
  }
}

ReplayResult analyze_replay(const TransferFile& a, const TransferFile& b, const TransferOptions& opt) {
  ReplayResult res;
  const PairedPositions pp = pair_positions(a, b, res);
  const std::vector<double>& margin = pp.margin;
  const std::vector<int>& flip = pp.flip;
  const std::vector<std::int64_t>& cluster = pp.cluster;
  const std::size_t n = margin.size();
  res.n_positions = n;
  res.n_flips = static_cast<std::size_t>(std::accumulate(flip.begin(), flip.end(), 0));
  res.flip_rate = static_cast<double>(res.n_flips) / static_cast<double>(n);

  // Ranking: score = −margin, so a small margin ranks as "more likely to flip".
  std::vector<double> score(n);
  for (std::size_t i = 0; i < n; ++i) score[i] = -margin[i];
  const stats::RankedScores ranked(score);
  res.auc = ranked.roc_auc(flip);
  res.ap = ranked.average_precision(flip);
  res.auc_ci = stats::cluster_bootstrap_ci(
      cluster, [&](std::span<const double> w) { return ranked.roc_auc(flip, w); }, opt.bootstrap, opt.ci_level,
      opt.seed);

  // Leave one prompt out: weight 0 for its positions.
  std::vector<double> w(n, 1.0);
  for (std::size_t g = 0; g < res.prompts.size(); ++g) {
    for (std::size_t i = 0; i < n; ++i) w[i] = cluster[i] == static_cast<std::int64_t>(g) ? 0.0 : 1.0;
    double d = ranked.roc_auc(flip, w) - res.auc;
    res.prompts[g].lopo_delta_auc = d;
    if (std::isfinite(d) && !(std::abs(d) <= res.lopo_max_abs_delta)) {
      res.lopo_max_abs_delta = std::abs(d);
      res.lopo_prompt = res.prompts[g].prompt;
    }
  }

  calibrate(res, margin, flip, opt);
  heldout_brier(res, pp, opt);
  return res;
}

}  // namespace

namespace {

// The model digest the headers of `f` record ("" when none does).
std::string header_model_digest(const TransferFile& f) {
  for (const json& h : f.headers) {
    if (h.contains("model_sha256") && h["model_sha256"].is_string()) return h["model_sha256"].get<std::string>();
  }
  return "";
}

}  // namespace

void check_same_model(const TransferFile& a, const TransferFile& b) {
  // C7 compares two arms on one model: files from two models differ in tokens for reasons that
  // have nothing to do with the arms. Files without a header (produced elsewhere) are not checked.
  const std::string da = header_model_digest(a), db = header_model_digest(b);
  QC_INPUT(da.empty() || db.empty() || da == db,
           "{} and {}: header field `model_sha256`: expected the same model in both files, found {} in A and {} in B: "
           "C7 compares two arms on one model",
           a.path, b.path, printable_text(da), printable_text(db));
}

TransferResult analyze_transfer(const TransferFile& a, const TransferFile& b, const TransferOptions& options) {
  QC_INPUT(options.folds >= 1, "--folds: expected >= 1, found {}", options.folds);
  QC_INPUT(options.initial_bins >= 1, "initial bins: expected >= 1, found {}", options.initial_bins);
  check_mode(a, options.replay);
  check_mode(b, options.replay);
  check_same_model(a, b);
  TransferResult res;
  res.path_a = a.path;
  res.path_b = b.path;
  res.headers_a = json(a.headers);
  res.headers_b = json(b.headers);
  res.values_a = a.values;
  res.values_b = b.values;
  res.records_a = a.records.size();
  res.records_b = b.records.size();
  res.options = options;
  if (options.replay) {
    res.replay = analyze_replay(a, b, options);
  } else {
    res.sequence = analyze_sequences(a, b);
  }
  return res;
}

// ---------------------------------------------------------------------------------------------
// Output

namespace {

json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json edge(double v) {
  if (std::isnan(v)) return nullptr;
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return v;
}

json opt_int(const std::optional<std::int64_t>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

json to_json(const TransferResult& r) {
  const TransferOptions& o = r.options;
  json j = results_envelope("transfer");
  j["mode"] = o.replay ? "replay" : "generate";
  j["inputs"] = {{"a", {{"path", r.path_a}, {"role", "reference"}, {"records", r.records_a}, {"values", r.values_a},
                        {"headers", r.headers_a}}},
                 {"b", {{"path", r.path_b}, {"records", r.records_b}, {"values", r.values_b}, {"headers", r.headers_b}}}};
  j["options"] = {{"seed", o.seed},
                  {"seed_bootstrap", o.seed},
                  {"seed_folds", o.seed + 1},
                  {"rng", "std::mt19937_64(seed); uniform_index by rejection; Fisher-Yates (docs/statistics.md)"},
                  {"bootstrap", o.bootstrap},
                  {"ci_level", o.ci_level},
                  {"initial_bins", o.initial_bins},
                  {"min_bin_support", o.min_bin_support},
                  {"folds", o.folds}};
  if (r.sequence) {
    const SequenceResult& s = *r.sequence;
    json rows = json::array();
    for (const SequenceRow& row : s.rows) {
      rows.push_back({{"prompt", row.prompt},
                      {"len_a", row.len_a},
                      {"len_b", row.len_b},
                      {"identical", row.identical},
                      {"first_divergence_position", opt_int(row.first_divergence_position)},
                      {"tokens_until_divergence", row.tokens_until_divergence}});
    }
    j["sequence"] = {{"prompts", s.n_prompts},
                     {"identical", s.n_identical},
                     {"mean_tokens_until_divergence", num(s.mean_tokens_until_divergence)},
                     {"per_prompt", rows}};
  }
  if (r.replay) {
    const ReplayResult& p = *r.replay;
    json cal = json::array();
    for (const CalibrationBin& c : p.calibration) {
      cal.push_back({{"lo", edge(c.lo)},
                     {"hi", edge(c.hi)},
                     {"margin_min", num(c.x_min)},
                     {"margin_max", num(c.x_max)},
                     {"support", c.support},
                     {"flips", c.flips},
                     {"rate", num(c.rate)},
                     {"p_smoothed", num(c.p)},
                     {"p_interval", {num(c.p_lo), num(c.p_hi)}}});
    }
    json iso = json::array();
    for (const IsotonicBlock& b : p.isotonic) {
      iso.push_back({{"margin_lo", b.x_lo}, {"margin_hi", b.x_hi}, {"p", num(b.p)}, {"weight", b.weight}});
    }
    json prompts = json::array();
    for (const PromptReplayRow& row : p.prompts) {
      prompts.push_back({{"prompt", row.prompt},
                         {"positions", row.n_positions},
                         {"flips", row.n_flips},
                         {"first_flip_position", opt_int(row.first_flip_position)},
                         {"lopo_delta_auc", num(row.lopo_delta_auc)}});
    }
    const BrierResult& b = p.brier;
    json fold_of = json::array();
    for (std::size_t g = 0; g < b.fold_of_prompt.size(); ++g) fold_of.push_back(b.fold_of_prompt[g]);
    j["replay"] = {
        {"prompts", p.n_prompts},
        {"positions", p.n_positions},
        {"flips", p.n_flips},
        {"flip_rate", num(p.flip_rate)},
        {"roc_auc", {{"value", num(p.auc)},
                     {"score", "-margin of A (small margin predicts flip); ties count 1/2"},
                     {"ci", {num(p.auc_ci.lo), num(p.auc_ci.hi)}},
                     {"ci_level", p.auc_ci.level},
                     {"ci_method", "percentile, cluster bootstrap over prompts"},
                     {"resamples", p.auc_ci.n_resamples},
                     {"resamples_valid", p.auc_ci.n_valid},
                     {"seed", p.auc_ci.seed}}},
        {"average_precision", {{"value", num(p.ap)}, {"prevalence", num(p.flip_rate)}}},
        {"lopo", {{"max_abs_delta_auc", num(p.lopo_max_abs_delta)},
                  {"prompt", p.lopo_max_abs_delta >= 0 ? json(p.lopo_prompt) : json(nullptr)}}},
        {"calibration", {{"method", "merged quantile bins, Beta(1,1) smoothing (flips+1)/(n+2)"},
                         {"bins", cal}}},
        {"isotonic", {{"method", "decreasing isotonic regression (PAVA), sensitivity analysis"}, {"blocks", iso}}},
        {"brier", {{"computed", b.computed},
                   {"folds", b.folds},
                   {"seed", b.seed},
                   {"heldout_positions", b.n_heldout},
                   {"model", num(b.model)},
                   {"baseline", num(b.baseline)},
                   {"isotonic", num(b.isotonic)},
                   {"skill", num(b.skill)},
                   {"fold_of_prompt", fold_of}}},
        {"per_prompt", prompts}};
  }
  return j;
}

std::string summary(const TransferResult& r) {
  const TransferOptions& o = r.options;
  std::string s = fmt::format("qconform transfer: A = {} (reference, {}), B = {} ({}); mode {}\n", r.path_a, r.values_a,
                              r.path_b, r.values_b, o.replay ? "replay (teacher-forced)" : "generate (free-running)");
  constexpr std::size_t kMaxRows = 40;
  if (r.sequence) {
    const SequenceResult& q = *r.sequence;
    s += fmt::format("identical sequences: {}/{}", q.n_identical, q.n_prompts);
    if (std::isfinite(q.mean_tokens_until_divergence)) {
      s += fmt::format("; mean tokens until divergence (diverging prompts) {:.2f}", q.mean_tokens_until_divergence);
    }
    s += fmt::format("\n  {:<20} {:>6} {:>6} {:>18} {:>12}\n", "prompt", "len A", "len B", "first divergence",
                     "tokens equal");
    for (std::size_t i = 0; i < q.rows.size() && i < kMaxRows; ++i) {
      const SequenceRow& row = q.rows[i];
      s += fmt::format("  {:<20} {:>6} {:>6} {:>18} {:>12}\n", row.prompt, row.len_a, row.len_b,
                       row.first_divergence_position ? std::to_string(*row.first_divergence_position) : "identical",
                       row.tokens_until_divergence);
    }
    if (q.rows.size() > kMaxRows) s += fmt::format("  ... {} more prompts (see --json)\n", q.rows.size() - kMaxRows);
  }
  if (r.replay) {
    const ReplayResult& p = *r.replay;
    s += fmt::format("positions {} over {} prompts; flips {} (flip rate {:.4f})\n", p.n_positions, p.n_prompts,
                     p.n_flips, p.flip_rate);
    s += fmt::format(
        "ROC-AUC (small margin of A predicts a flip) {:.4f}, {:.0f}% CI [{:.4f}, {:.4f}] (cluster bootstrap over {} "
        "prompts, {} resamples, {} valid, seed {})\n",
        p.auc, 100 * p.auc_ci.level, p.auc_ci.lo, p.auc_ci.hi, p.n_prompts, p.auc_ci.n_resamples, p.auc_ci.n_valid,
        p.auc_ci.seed);
    s += fmt::format("average precision {:.4f} (prevalence {:.4f})\n", p.ap, p.flip_rate);
    if (std::isfinite(p.lopo_max_abs_delta)) {
      s += fmt::format("leave-one-prompt-out: max |dAUC| {:.4g} (prompt {})\n", p.lopo_max_abs_delta, p.lopo_prompt);
    }
    s += fmt::format("calibration: merged quantile bins (min support {}), Beta(1,1) smoothing, {:.0f}% interval\n",
                     o.min_bin_support, 100 * o.ci_level);
    s += fmt::format("  {:>24} {:>8} {:>6} {:>8} {:>10} {:>20}\n", "margin bin [lo, hi)", "support", "flips", "rate",
                     "p smoothed", "interval");
    for (const CalibrationBin& c : p.calibration) {
      s += fmt::format("  {:>24} {:>8} {:>6} {:>8.4f} {:>10.4f} {:>20}\n", fmt::format("[{:.4g}, {:.4g})", c.lo, c.hi),
                       c.support, c.flips, c.rate, c.p, fmt::format("[{:.4f}, {:.4f}]", c.p_lo, c.p_hi));
    }
    s += fmt::format("isotonic (decreasing, PAVA; sensitivity analysis): {} blocks\n", p.isotonic.size());
    s += fmt::format("  {:>24} {:>8} {:>10}\n", "margin range", "weight", "p");
    for (std::size_t i = 0; i < p.isotonic.size() && i < kMaxRows; ++i) {
      const IsotonicBlock& b = p.isotonic[i];
      s += fmt::format("  {:>24} {:>8} {:>10.4f}\n", fmt::format("[{:.4g}, {:.4g}]", b.x_lo, b.x_hi), b.weight, b.p);
    }
    if (p.isotonic.size() > kMaxRows) s += fmt::format("  ... {} more blocks (see --json)\n", p.isotonic.size() - kMaxRows);
    const BrierResult& b = p.brier;
    if (b.computed) {
      s += fmt::format(
          "held-out Brier ({}-fold by prompt, seed {}, {} positions): binned map {:.5f}, constant baseline {:.5f}, "
          "isotonic {:.5f}; skill {:.2f}%\n",
          b.folds, b.seed, b.n_heldout, b.model, b.baseline, b.isotonic, 100 * b.skill);
    } else {
      s += "held-out Brier: not computed (needs at least two prompts and --folds >= 2)\n";
    }
  }
  return s;
}

}  // namespace qc::transfer
