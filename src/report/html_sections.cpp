// The report's sections that say what was decided and on what evidence: the interchangeability
// answer (banner), the verdict table, the arms with their formulas, and the identity contract with
// the manifests (collapsed). The figures are in html_report.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>

#include "qconform/check.hpp"
#include "report/html_page.hpp"

namespace qc::html {

// The interchangeability answer first (`interchangeability`: answer, reason, advice, licenses), then a
// warning the run carried about its prompts (conform on a real model without a tokenizer).
void answer_banner(Page& p, const json& results) {
  // A results file assembled from a verify run carries verify's answer.
  const json& top = sub(results, "interchangeability");
  const json& a = top.is_object() ? top : sub(sub(results, "verify"), "interchangeability");
  if (a.is_object()) {
    const std::string answer = str(a, "answer");
    const bool known = answer == "identical" || answer == "explained" || answer == "unexplained" || answer == "different";
    p.f("<div class=\"answer {}\" id=\"qc-answer\"><div><span class=\"answer-name\">{}</span> {}</div>",
        known ? answer : "unknown", html_escape(answer.empty() ? "-" : answer), html_escape(str(a, "reason")));
    if (!str(a, "advice").empty()) p.f("<div><b>next:</b> {}</div>", html_escape(str(a, "advice")));
    if (!str(a, "licenses").empty()) p.f("<div class=\"muted\">what this licenses: {}</div>", html_escape(str(a, "licenses")));
    p.raw("</div>\n");
  }
  if (const std::string warning = str(sub(results, "prompts"), "warning"); !warning.empty()) {
    p.f("<div class=\"banner unverified\" id=\"qc-prompts-warning\">{}</div>\n", html_escape(warning));
  }
}

void verdict_section(Page& p, const json& results) {
  const json& checks = sub(results, "checks");
  p.raw("<section id=\"verdicts\"><h2>Verdicts</h2>\n");
  if (!checks.is_array() || checks.empty()) {
    p.raw("<p class=\"note\">No checks in these results.</p></section>\n");
    return;
  }
  p.raw("<table class=\"verdicts\"><thead><tr><th>check</th><th>verdict</th><th>evidence</th><th>a violation points "
        "first to</th><th>exclusions</th></tr></thead><tbody>\n");
  for (const json& c : checks) {
    const std::string verdict = str(c, "verdict");
    std::string exclusions;
    if (const json& ex = sub(c, "exclusions"); ex.is_array()) {
      for (const json& e : ex) exclusions += "<li>" + html_escape(e.is_string() ? e.get<std::string>() : e.dump()) + "</li>";
    }
    if (exclusions.empty()) exclusions = "<span class=\"muted\">none</span>";
    else exclusions = "<ul>" + exclusions + "</ul>";
    const bool tolerance = c.is_object() && c.contains("falsifiable") && c.at("falsifiable").is_boolean() &&
                           !c.at("falsifiable").get<bool>();
    p.f("<tr class=\"row-{}\"><td><b>{}</b> {}{}</td><td>{}</td><td>{}", verdict_class(verdict), html_escape(str(c, "id")),
        html_escape(str(c, "title")), tolerance ? " <span class=\"muted\">(tolerance-based)</span>" : "", badge(verdict),
        html_escape(str(c, "summary")));
    if (const json& ev = sub(c, "evidence"); !ev.is_null() && !(ev.is_object() && ev.empty())) {
      p.f("<details><summary>evidence</summary>{}</details>", pre_json(ev));
    }
    p.f("</td><td>{}</td><td>{}</td></tr>\n", html_escape(str(c, "points_to")), exclusions);
  }
  p.raw("</tbody></table></section>\n");
}

namespace {

// The arm's formula: declared, identified by `qconform identify` (conform runs it on arms that
// declare none: verdict, probes, held-out figures), or none. `formula` is conform's summary
// (docs/results-schema.md); without one (a verify results file) the declared epilogue speaks.
std::string formula_cell(const json& a, const std::string& epilogue) {
  const json& f = sub(a, "formula");
  const std::string source = str(f, "source");
  if (source.empty()) {
    return epilogue.empty() ? "<span class=\"muted\">none declared</span>"
                            : fmt::format("declared: <code>{}</code>", html_escape(epilogue));
  }
  if (source == "declared") {
    const std::string name = str(f, "declared"), formula = str(f, "formula");
    return fmt::format("declared: <code>{}</code>{}", html_escape(name),
                       formula.empty() || formula == name ? std::string() : fmt::format("<div><code>{}</code></div>", html_escape(formula)));
  }
  if (source == "none") return fmt::format("<span class=\"muted\">none: {}</span>", html_escape(str(f, "reason")));
  const std::string verdict = str(f, "verdict");
  const json& heldout = sub(f, "heldout");
  const auto count = [](const json& v) { return v.is_number_integer() ? std::to_string(v.get<int64_t>()) : std::string("?"); };
  std::string cell = fmt::format("identified by <code>qconform identify</code>: {} &middot; {} probes &middot; held-out {}/{} explained",
                                 fmt::format("<span class=\"verdict {}\">{}</span>",
                                             verdict == "identified" ? "pass" : verdict == "unexplained" ? "fail" : "unknown",
                                             html_escape(verdict)),
                                 count(sub(f, "probes")), count(sub(heldout, "matching")), count(sub(heldout, "outputs")));
  if (verdict == "identified") {
    std::string named;
    for (const json& n : sub(f, "named")) named += (named.empty() ? "" : ", ") + html_escape(n.is_string() ? n.get<std::string>() : n.dump());
    cell += fmt::format("<div><code>{}</code>{}</div><div class=\"muted\">declared for C1&ndash;C6 as <code>{}</code></div>",
                        html_escape(str(f, "formula")), named.empty() ? std::string(" (not a production formula of the table)") : " = " + named,
                        html_escape(str(f, "declared")));
    return cell;
  }
  cell += fmt::format("<div class=\"muted\">{}; conform went on without a declared formula for this arm</div>", html_escape(str(f, "reason")));
  for (const json& c : sub(f, "survivors")) cell += fmt::format("<div>class: <code>{}</code></div>", html_escape(c.is_string() ? c.get<std::string>() : c.dump()));
  for (const json& e : sub(f, "separation")) cell += fmt::format("<div class=\"muted\">{}</div>", html_escape(str(e, "summary")));
  return cell;
}

}  // namespace

void arms_section(Page& p, const json& results) {
  json arms = sub(results, "arms");
  if (!arms.is_array() || arms.empty()) arms = sub(sub(results, "verify"), "arms");
  if (!arms.is_array() || arms.empty()) return;
  p.raw("<section id=\"arms\"><h2>Arms and the kernel that actually ran</h2>\n"
        "<table><thead><tr><th>arm</th><th>kernel (reported by the arm)</th><th>epilogue</th><th>formula</th><th>device</th>"
        "<th>library</th><th>build</th></tr></thead><tbody>\n");
  for (const json& a : arms) {
    const json& rec = sub(a, "record");
    std::string label = str(a, "label");
    if (label.empty()) label = str(rec, "arm");
    const std::string kernel = str(rec, "kernel");
    std::string epilogue = str(rec, "epilogue");
    if (epilogue.empty()) epilogue = str(a, "epilogue");
    p.f("<tr><td><code>{}</code><div class=\"muted\">{}</div></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td></tr>\n",
        html_escape(label), html_escape(str(a, "description")),
        kernel.empty() ? "<span class=\"verdict fail\">no kernel evidence</span>" : html_escape(kernel),
        html_escape(epilogue.empty() ? "-" : epilogue), formula_cell(a, epilogue), html_escape(str(rec, "device")),
        html_escape(str(rec, "library")), html_escape(str(rec, "build")));
  }
  p.raw("</tbody></table></section>\n");
}

// A section heading for a check: its title from the check table (`qconform checks`), so the
// report cannot name a check differently from the CLI, the JSON and docs/checks.md.
std::string check_heading(std::string_view id) {
  std::string title = check_spec(id).title;
  if (!title.empty()) title[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(title[0])));
  return fmt::format("{} ({})", title, id);
}

void manifests_section(Page& p, const json& results) {
  const json& m = sub(results, "manifests");
  if (!m.is_object()) return;
  p.f("<section id=\"identity\"><h2>{}</h2>\n", html_escape(check_heading("C0")));
  if (const json& join = sub(m, "join"); join.is_object()) {
    const bool verified = join.contains("verified") && join.at("verified").is_boolean() && join.at("verified").get<bool>();
    p.f("<p>Treatment <code>{}</code>: {}</p>\n", html_escape(str(join, "treatment")),
        verified ? "<span class=\"verdict pass\">verified</span> the runs differ only in the declared treatment."
                 : "<span class=\"verdict fail\">not verified</span> the runs differ outside the declared treatment, "
                   "or the evidence is incomplete.");
    const json& fields = sub(join, "fields");
    if (fields.is_array()) {
      std::string treatment_rows, violation_rows, all_rows;
      for (const json& fr : fields) {
        const std::string row =
            fmt::format("<tr class=\"{}\"><td><code>{}</code></td><td>{}</td><td><code>{}</code></td><td><code>{}</code>"
                        "</td><td>{}</td></tr>\n",
                        sub(fr, "violation").is_boolean() && sub(fr, "violation").get<bool>() ? "row-fail" : "",
                        html_escape(str(fr, "field")), html_escape(str(fr, "status")),
                        html_escape(sub(fr, "a").is_null() ? "(absent)" : sub(fr, "a").dump()),
                        html_escape(sub(fr, "b").is_null() ? "(absent)" : sub(fr, "b").dump()), html_escape(str(fr, "note")));
        all_rows += row;
        if (str(fr, "status") == "differs (treatment)") treatment_rows += row;
        if (sub(fr, "violation").is_boolean() && sub(fr, "violation").get<bool>()) violation_rows += row;
      }
      const char* head = "<table><thead><tr><th>field</th><th>status</th><th>A</th><th>B</th><th>note</th></tr></thead>"
                         "<tbody>\n";
      if (!violation_rows.empty()) p.f("<h3>Violations</h3>{}{}</tbody></table>\n", head, violation_rows);
      if (!treatment_rows.empty()) p.f("<h3>Declared differences</h3>{}{}</tbody></table>\n", head, treatment_rows);
      p.f("<details class=\"data\"><summary>every compared field</summary>{}{}</tbody></table></details>\n", head,
          all_rows);
    }
  }
  if (const json& files = sub(m, "files"); files.is_array()) {
    // The provenance of every run, long and rarely read: collapsed under the verdict above.
    p.f("<details class=\"data\" id=\"qc-manifests\"><summary>the {} manifests (kind, arm, kernel, inputs and their "
        "SHA-256)</summary>\n",
        files.size());
    for (const json& file : files) {
      const json& man = sub(file, "manifest");
      p.f("<h3>Manifest <code>{}</code></h3><p>kind {}, arm <code>{}</code>, kernel {}, created {}, qconform {}</p>\n",
          html_escape(str(file, "path")), html_escape(str(man, "kind")), html_escape(str(man, "arm")),
          html_escape(str(sub(man, "treatment"), "kernel").empty() ? "(no kernel evidence)"
                                                                  : str(sub(man, "treatment"), "kernel")),
          html_escape(str(man, "created")), html_escape(str(man, "project_version")));
      if (const json& inputs = sub(man, "inputs"); inputs.is_object() && !inputs.empty()) {
        p.raw("<table><thead><tr><th>input</th><th>path</th><th>sha256</th></tr></thead><tbody>\n");
        for (const auto& [role, e] : inputs.items()) {
          p.f("<tr><td>{}</td><td><code>{}</code></td><td><code>{}</code></td></tr>\n", html_escape(role),
              html_escape(str(e, "path")), html_escape(str(e, "sha256")));
        }
        p.raw("</tbody></table>\n");
      }
    }
    p.raw("</details>\n");
  }
  p.raw("</section>\n");
}

}  // namespace qc::html
