// The report's C8 section (conform --invariance-mates, docs/invariance.md): per arm the check over
// the captured layers, each layer's verdict and thresholds, the decoder's per-layer counts inside
// batches of mates, and each sequence alone against with mates (C7's statistics on the differences).
#include <fmt/format.h>

#include <string>

#include "core/fileio.hpp"
#include "report/html_page.hpp"

namespace qc::html {

namespace {

// The C8 verdict words map onto the check verdicts' colours: invariant passes, a predicted variance is
// reported (explained, not invariant), an unexplained one fails.
std::string invariance_badge(const json& verdict) {
  if (!verdict.is_string()) return "<span class=\"verdict unknown\">nothing compared</span>";
  const std::string v = verdict.get<std::string>();
  const char* cls = v == "invariant" ? "pass" : v == "variant, predicted" ? "reported" : "fail";
  return fmt::format("<span class=\"verdict {}\">{}</span>", cls, html_escape(v));
}

void captured_layers_table(Page& p, const json& arm) {
  const json& layers = sub(arm, "layers");
  if (!layers.is_array() || layers.empty()) return;
  size_t variant = 0;
  for (const json& l : layers) variant += str(l, "verdict") != "invariant";
  p.table_start(fmt::format("captured layers: {} of {} not invariant", variant, layers.size()));
  p.raw("<table><thead><tr><th>layer</th><th>M</th><th>configurations</th><th>differing</th><th>elements differing "
        "(observed / predicted)</th><th>thresholds</th><th>verdict</th></tr></thead><tbody>\n");
  for (const json& l : layers) {
    size_t configs = 0, differing = 0;
    double observed = 0, predicted = 0;
    bool all_predicted = true;
    if (const json& cs = sub(l, "configs"); cs.is_array()) {
      for (const json& c : cs) {
        ++configs;
        const double od = num(c, "observed_diff").value_or(0);
        differing += od > 0;
        observed += od;
        if (const auto pd = num(c, "predicted_diff")) {
          predicted += *pd;
        } else {
          all_predicted = false;
        }
      }
    }
    std::string thresholds;
    if (const json& ts = sub(l, "thresholds"); ts.is_array()) {
      for (const json& t : ts) thresholds += (thresholds.empty() ? "" : "<br>") + html_escape(t.is_string() ? t.get<std::string>() : t.dump());
    }
    p.f("<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{:.0f} / {}</td><td>{}</td>"
        "<td>{}</td></tr>\n",
        html_escape(str(l, "layer")), fmt_num(num(l, "m")), configs, differing > 0 ? "nonzero" : "", differing, observed,
        all_predicted ? fmt::format("{:.0f}", predicted) : "-", thresholds.empty() ? "-" : thresholds,
        invariance_badge(sub(l, "verdict")));
  }
  p.raw("</tbody></table>\n");
  p.table_end();
}

void decoder_layers_table(Page& p, const json& decoder) {
  const json& layers = sub(decoder, "layers");
  if (!layers.is_array()) return;
  p.f("<p>In the model ({}): {} of {} outputs of {} calls differ bitwise from {}.{}</p>\n",
      html_escape(str(decoder, "title")), fmt_num(num(decoder, "differing")), fmt_num(num(decoder, "elements")),
      fmt_num(num(decoder, "calls")), html_escape(str(decoder, "baseline")),
      sub(decoder, "note").is_string() ? " (" + html_escape(str(decoder, "note")) + ")" : std::string());
  p.table_start("per linear layer in the model");
  p.f("<table><thead><tr><th>layer</th><th>calls</th><th>outputs</th><th>differing</th><th>first difference "
      "(row, col: {} / here, fp32 bits)</th></tr></thead><tbody>\n",
      html_escape(str(decoder, "baseline")));
  for (const json& l : layers) {
    const json& first = sub(l, "first");
    p.f("<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td></tr>\n",
        html_escape(str(l, "layer")), fmt_num(num(l, "calls")), fmt_num(num(l, "elements")),
        num(l, "differing").value_or(0) > 0 ? "nonzero" : "", fmt_num(num(l, "differing")),
        first.is_object() ? html_escape(fmt::format("row {} col {}: {} / {}", fmt_num(num(first, "row")),
                                                    fmt_num(num(first, "col")), str(first, "baseline"), str(first, "here")))
                          : "-");
  }
  p.raw("</tbody></table>\n");
  p.table_end();
}

void sequences_table(Page& p, const json& arm, const char* against) {
  const json& seq = sub(sub(arm, "generation"), "sequence");
  const json& rp = sub(sub(arm, "replay"), "replay");
  p.f("<p>Sequences: {} of {} free-running generations identical to the plain run {}; teacher-forced replay: {} "
      "flips in {} positions (rate {}){}.</p>\n",
      fmt_num(num(seq, "identical")), fmt_num(num(seq, "prompts")), against, fmt_num(num(rp, "flips")),
      fmt_num(num(rp, "positions")), fmt_num(num(rp, "flip_rate"), 5),
      sub(arm, "records_identical").is_boolean() && sub(arm, "records_identical").get<bool>()
          ? "; every record (token, top-2 logits, margin) identical"
          : "");
  const json& rows = sub(seq, "per_prompt");
  if (!rows.is_array() || rows.empty()) return;
  p.table_start("per sequence");
  p.raw("<table><thead><tr><th>prompt</th><th>tokens (plain / variant)</th><th>identical</th><th>first divergence "
        "(position)</th><th>tokens until divergence</th></tr></thead><tbody>\n");
  for (const json& r : rows) {
    const bool same = sub(r, "identical").is_boolean() && sub(r, "identical").get<bool>();
    p.f("<tr><td><code>{}</code></td><td>{} / {}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td></tr>\n",
        html_escape(printable_text(str(r, "prompt"), 80)), fmt_num(num(r, "len_a")), fmt_num(num(r, "len_b")),
        same ? "" : "nonzero", same ? "yes" : "no", fmt_num(num(r, "first_divergence_position")),
        same ? "-" : fmt_num(num(r, "tokens_until_divergence")));
  }
  p.raw("</tbody></table>\n");
  p.table_end();
}

// The captured layers at TP 1 and the degree (`qconform invariance --tp`'s layers).
void tp_layers_table(Page& p, const json& tp) {
  const json& layers = sub(tp, "layers");
  if (!layers.is_array() || layers.empty()) return;
  p.f("<p>Captured layers at TP 1 and {} ({}): {}.</p>\n", fmt_num(num(tp, "degree")), html_escape(str(tp, "reduction")),
      invariance_badge(sub(tp, "verdict")));
  p.table_start("captured layers at the tensor-parallel degree");
  p.raw("<table><thead><tr><th>layer</th><th>split</th><th>elements</th><th>differing from TP 1 (observed / "
        "predicted)</th><th>predicted == observed</th><th>verdict</th></tr></thead><tbody>\n");
  for (const json& l : layers) {
    const json& degrees = sub(l, "degrees");
    const json& d = degrees.is_array() && !degrees.empty() ? degrees.back() : json();
    if (!d.is_object() || (sub(d, "applicable").is_boolean() && !sub(d, "applicable").get<bool>())) {
      p.f("<tr><td><code>{}</code></td><td>{}</td><td colspan=\"4\">not applicable: {}</td></tr>\n",
          html_escape(str(l, "layer")), html_escape(str(l, "style")), html_escape(d.is_object() ? str(d, "note") : "-"));
      continue;
    }
    const json& same = sub(d, "predicted_equals_observed");
    p.f("<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"{}\">{} / {}</td><td>{}</td><td>{}</td></tr>\n",
        html_escape(str(l, "layer")), html_escape(str(l, "style")), fmt_num(num(d, "elements")),
        num(d, "observed_diff").value_or(0) > 0 ? "nonzero" : "", fmt_num(num(d, "observed_diff")),
        fmt_num(num(d, "predicted_diff")), same.is_boolean() ? (same.get<bool>() ? "yes" : "NO") : "-",
        invariance_badge(sub(d, "verdict")));
  }
  p.raw("</tbody></table>\n");
  p.table_end();
}

}  // namespace

void invariance_section(Page& p, const json& results) {
  const json& inv = sub(results, "invariance");
  if (!inv.is_object()) return;
  p.f("<section id=\"invariance\"><h2>{}</h2>\n", html_escape(check_heading("C8")));
  p.raw("<p>Each arm alone: does a row get the same bits whatever batch it is in (and whatever the tensor-parallel "
        "degree)? The captured layers' rows run in batches of other sizes and with other batch mates and are compared "
        "bit for bit with the layer run whole; the run records' claims predict which elements may differ. The model "
        "then runs again with every linear layer's rows inside batches of synthetic mates, and as tensor-parallel "
        "shards, compared per layer and per sequence with the plain run. Invariance is a property of one arm; the "
        "pair's answer above does not depend on it.</p>\n");
  const json& tp = sub(inv, "tp");
  p.f("<p>Batch mates: {}; tensor parallelism: {}.</p>\n",
      sub(inv, "mates").is_array() ? html_escape(sub(inv, "mates").dump()) : "not run",
      tp.is_object() ? html_escape(fmt::format("TP 1 against TP {} ({})", fmt_num(num(tp, "degree")), str(tp, "reduction")))
                     : "not run");
  const json& arms = sub(inv, "arms");
  if (!arms.is_array()) return p.raw("</section>\n");
  for (const json& arm : arms) {
    const json& c = sub(arm, "check");
    p.f("<h3><code>{}</code> {}</h3>\n<p>{}</p>\n", html_escape(str(arm, "arm")), badge(str(c, "verdict")),
        html_escape(str(c, "summary")));
    captured_layers_table(p, arm);
    if (const json& m = sub(arm, "mates"); m.is_object()) {
      p.raw("<h4>The model with batch mates</h4>\n");
      decoder_layers_table(p, sub(m, "decoder"));
      sequences_table(p, m, "(each prompt alone)");
    }
    if (const json& t = sub(arm, "tp"); t.is_object()) {
      p.f("<h4>Tensor parallel {} ({})</h4>\n", fmt_num(num(t, "degree")), html_escape(str(t, "reduction")));
      tp_layers_table(p, t);
      decoder_layers_table(p, sub(t, "decoder"));
      if (const json& u = sub(t, "unsharded"); u.is_object() && !u.empty()) {
        p.f("<p>{} layers ran unsharded (the degree does not divide them, or block-scaled weights).</p>\n", u.size());
      }
      sequences_table(p, t, "(unsharded)");
    }
  }
  p.raw("</section>\n");
}

}  // namespace qc::html
