// `qconform sweep --arms A,B --k 512,1024,...,32768 --m 512 --n 1024 --seeds 5 [--json F]`:
// divergence versus reduction depth for two arms of one format (paper Section VII), with the fits
// of prevalence versus K. See docs/sweep.md.
#include <fmt/format.h>

#include <charconv>
#include <memory>
#include <string>
#include <vector>

#include "cli/cli.hpp"
#include "cli/paths.hpp"
#include "cli/lists.hpp"
#include "cli/progress.hpp"
#include "cli/run_manifest.hpp"
#include "qconform/error.hpp"
#include "core/fileio.hpp"
#include "orchestrate/sweep.hpp"

namespace qc::cli {
namespace {

VerbRunner setup_sweep(CLI::App& app) {
  auto pair = std::make_shared<std::string>();
  auto ks = std::make_shared<std::string>("512,1024,2048,4096,8192,16384,32768");
  auto o = std::make_shared<SweepOptions>();
  auto json = std::make_shared<std::string>();
  app.add_option("--arms,--pair", *pair,
                 "two arms of one format, A,B (`--pair` is the old spelling): INT8 arm labels (cpu:vllm-cutlass,cpu:vllm-triton) or FP8 arms "
                 "(cpu:fp8-<model>: hopper-fp8-chain, hopper-fp8-promote4, exact, sequential, blocked-<chunk>, "
                 "split-k-<splits>; the old aliases fp8:sequential, fp8:blocked-<chunk>, fp8:split-k-<splits>, "
                 "fp8:exact; cuda:cublaslt-fp8[-fastacc]; docs/accumulation.md) or block-scaled FP8 arms "
                 "(cpu:fp8-block-<form>[+<chain>], on block-scaled operands, --block)")
      ->required();
  app.add_option("--k", *ks, "comma-separated reduction depths")->capture_default_str();
  add_positive_option(app, "--m", o->m, "rows (tokens)");
  add_positive_option(app, "--n", o->n, "output channels");
  app.add_option("--block", o->block,
                 "block-scaled FP8 pairs (cpu:fp8-block-<form>): 1 x BLOCK activation groups and BLOCK x BLOCK weight "
                 "blocks")
      ->capture_default_str()
      ->check(positive_integer(o->block));
  add_positive_option(app, "--seeds", o->seeds, "seeds per depth");
  add_non_negative_option(app, "--first-seed", o->first_seed, "first seed");
  app.add_option("--confidence", o->confidence, "level of the Clopper-Pearson intervals")
      ->capture_default_str()
      ->check(finite_in(0x1p-20, 1 - 0x1p-20));
  add_non_negative_option(app, "--threads", o->threads, "worker threads (0: all cores)");
  auto no_explained = std::make_shared<bool>(false);
  app.add_flag("--no-explained", *no_explained,
               "skip the explained column (each arm's declared model evaluated per cell: the share of differing "
               "elements both models predicted)");
  auto manifest = std::make_shared<std::string>();
  add_manifest_option(app, *manifest);
  app.add_option("--json", *json, "write the results (schema_version 1, kind qconform-sweep) to this file");
  return [=] {
    SweepOptions opts = *o;
    opts.explained = !*no_explained;
    std::tie(opts.arm_a, opts.arm_b) = parse_pair("--arms", *pair);
    std::vector<PathUse> paths_in;
    add_arm_inputs(paths_in, "--arms", opts.arm_a);
    add_arm_inputs(paths_in, "--arms", opts.arm_b);
    check_output_paths(paths_in, {{"--json", *json}, {"--manifest", manifest_path(*manifest, *json)}});
    opts.ks = parse_positive_list("--k", *ks);
    Progress progress("sweep");
    opts.progress = [&](size_t done, size_t total, const std::string& item) { progress.update(done, total, item); };
    const SweepResult r = run_sweep(opts);
    progress.finish();
    if (!json->empty()) write_file_atomic(*json, to_json(r).dump(1) + "\n");
    fmt::print("{}", format_sweep(r));
    if (!json->empty()) fmt::print("results: {}\n", *json);
    // Operands are synthesized from the seeds (no input files): the configuration is the identity.
    std::optional<RunRecord> record;
    if (r.arms.contains("a")) record = r.arms["a"].get<RunRecord>();
    write_run_manifest(*manifest, *json, "sweep", *pair, record, {},
                       {{"ks", opts.ks}, {"m", opts.m}, {"n", opts.n}, {"seeds", opts.seeds},
                        {"first_seed", opts.first_seed}, {"arms", r.arms}});
    return kExitOk;
  };
}

RegisterVerb register_sweep{{"sweep", "Divergence versus reduction depth for two arms of one format, with model fits", 70,
                             setup_sweep}};

}  // namespace
}  // namespace qc::cli
