// Renders report.html from a results JSON, for the headless-browser peer test
// (tests/peer/test_report_browser.py).
//   qc_render_report --sample DIR [--arm-b LABEL] [--hostile]   writes DIR/results.json from real library runs
//   qc_render_report RESULTS.json OUT.html [--chartjs PATH] [--no-charts]
#include <fmt/format.h>

#include <cstring>
#include <string>

#include "report_sample.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "qconform/report.hpp"

int main(int argc, char** argv) {
  try {
    std::string sample_dir, arm_b = "cpu:vllm-triton", chartjs, results_path, out_path;
    bool hostile = false, charts = true;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--sample" && i + 1 < argc) sample_dir = argv[++i];
      else if (arg == "--arm-b" && i + 1 < argc) arm_b = argv[++i];
      else if (arg == "--hostile") hostile = true;
      else if (arg == "--chartjs" && i + 1 < argc) chartjs = argv[++i];
      else if (arg == "--no-charts") charts = false;
      else if (results_path.empty()) results_path = arg;
      else if (out_path.empty()) out_path = arg;
      else {
        fmt::print(stderr, "qc_render_report: unexpected argument {}\n", arg);
        return 2;
      }
    }
    if (!sample_dir.empty()) {
      const nlohmann::json r = qc::test::build_sample_results(sample_dir, arm_b, hostile);
      qc::write_file_atomic(sample_dir + "/results.json", r.dump(1) + "\n");
      fmt::print("{}/results.json\n", sample_dir);
      return 0;
    }
    if (results_path.empty() || out_path.empty()) {
      fmt::print(stderr, "usage: qc_render_report RESULTS.json OUT.html [--chartjs PATH] [--no-charts] | --sample DIR\n");
      return 2;
    }
    qc::ReportOptions options;
    options.chartjs_path = chartjs;
    options.charts = charts;
    const nlohmann::json results = nlohmann::json::parse(qc::read_file(results_path));
    qc::write_file_atomic(out_path, qc::render_report(results, options));
    fmt::print("{}\n", out_path);
    return 0;
  } catch (const qc::Error& e) {
    fmt::print(stderr, "qc_render_report: {}\n", e.what());
    return e.kind() == qc::ErrorKind::input ? 2 : 3;
  } catch (const std::exception& e) {
    fmt::print(stderr, "qc_render_report: {}\n", e.what());
    return 3;
  }
}
