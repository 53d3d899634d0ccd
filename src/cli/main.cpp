// qconform's command line: builds one CLI11 subcommand per registered verb and maps errors to
// exit codes (2 = bad usage or input, 3 = internal error).
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <system_error>

#include "arms/plugin/plugin_arm.hpp"
#include "cli/cli.hpp"
#include "cli/did_you_mean.hpp"
#include "dist/dist.hpp"
#include "qconform/error.hpp"
#include "core/env_setting.hpp"
#include "core/fileio.hpp"
#include "core/output_lock.hpp"
#include "core/version.hpp"

namespace qc::cli {

std::vector<Verb>& verbs() {
  static std::vector<Verb> registry;
  return registry;
}

bool stderr_is_terminal() { return isatty(fileno(stderr)) != 0; }

namespace {

// Set while a verb runs. Code loaded into the process (an in-process plugin arm) that calls
// `exit()` would otherwise end the run with the plugin's status and no verdict: exit 0 must mean
// checked, so an exit during a run becomes exit 3 with a message.
std::atomic<bool> g_verb_running{false};

}  // namespace

void refuse_exit_during_run() {
  if (!g_verb_running.load()) return;
  std::fflush(stdout);
  std::fprintf(stderr, "qconform: internal error: exit() was called while the verb was still running (by code loaded "
                       "into the process, e.g. an in-process plugin arm), before any verdict: the run checked "
                       "nothing\n");
  std::_Exit(kExitInternal);
}

// Runs one verb with `g_verb_running` set (cleared on return and while an exception unwinds).
int run_marked(const VerbRunner& run) {
  struct Running {
    Running() { g_verb_running = true; }
    ~Running() { g_verb_running = false; }
  } running;
  return run();
}

}  // namespace qc::cli

namespace {

// Runs the parsed verb. Under MPI an error that reached here on one rank cannot be known to the
// others (they may wait in a collective), so it ends the whole job (MPI_Abort) with its exit code;
// errors the ranks agreed on (qc::dist::run_shared) end each rank normally, rank 0 alone printing.
int run_verb(const std::map<CLI::App*, qc::cli::VerbRunner>& runners) {
  using namespace qc::cli;
  const auto fail = [](int code) {
    if (qc::dist::world().size > 1) qc::dist::abort_job(code);
    return code;
  };
  try {
    for (auto& [sub, run] : runners) {
      if (!sub->parsed()) continue;
      const int rc = run_marked(run);
      // A verdict nobody could read is no verdict: stdout that cannot be written (a full disk,
      // `> /dev/full`, a closed pipe) is an error, not exit 0.
      if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        std::fprintf(stderr, "qconform: error: writing the results to stdout failed: %s\n", std::strerror(errno));
        return fail(kExitBadInput);
      }
      return rc;
    }
    return kExitBadInput;
  } catch (const qc::dist::JobFailed& e) {
    if (!e.message().empty()) std::fprintf(stderr, "qconform: error: %s\n", e.message().c_str());
    return e.code();
  } catch (const qc::Error& e) {
    if (e.kind() == qc::ErrorKind::arm_failure) {
      // An arm that crashed, hung, exited or wrote into its inputs: a failed check of that arm
      // (exit 1), reported before any verdict could be printed.
      std::fprintf(stderr, "qconform: arm failed: %s\n", e.what());
      return fail(kExitCheckFailed);
    }
    std::fprintf(stderr, "qconform: error: %s\n", e.what());
    return fail(e.kind() == qc::ErrorKind::input ? kExitBadInput : kExitInternal);
  } catch (const std::system_error& e) {
    // fmt::print throws when stdout cannot be written; any other system error is unexpected.
    if (!std::ferror(stdout)) {
      std::fprintf(stderr, "qconform: internal error: %s\n", e.what());
      return fail(kExitInternal);
    }
    std::fprintf(stderr, "qconform: error: writing the results to stdout failed: %s\n", e.what());
    return fail(kExitBadInput);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "qconform: error: out of memory (std::bad_alloc): the input asks for more memory than this "
                         "machine could give; reduce the sizes (docs/hostile-inputs.md)\n");
    return fail(kExitBadInput);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qconform: internal error: %s\n", e.what());
    return fail(kExitInternal);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qc::cli;
#if defined(__GLIBC__)
  // Verify and the model runs allocate and free buffers of a few to tens of MiB per layer and run.
  // By default glibc maps each one afresh (and unmaps it on free), so every reuse pays page faults
  // and kernel zeroing: 26 % of a 196-layer GPU verify on the H200 host (docs/performance.md).
  // Keep such blocks in the heap instead; the process's peak memory is unchanged.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  // Temporary output files are removed on SIGINT/SIGTERM/SIGHUP; a write past `ulimit -f` is an
  // error naming the file instead of SIGXFSZ; a mapped input that shrinks is an error, not SIGBUS.
  qc::install_cli_signal_handlers();
  std::atexit(refuse_exit_during_run);
  CLI::App app{"qconform: are two implementations of a quantized linear layer interchangeable?\n"
               "Localizes any difference to the stage that made it and measures whether it changes tokens."};
  app.set_version_flag("--version", std::string("qconform ") + qc::version());
  app.require_subcommand(1);
  app.fallthrough(false);

  auto registry = verbs();
  std::sort(registry.begin(), registry.end(), [](const Verb& a, const Verb& b) { return a.order < b.order; });
  std::map<CLI::App*, VerbRunner> runners;
  double arm_timeout = 0;
  std::vector<CLI::Option*> arm_timeout_options;
  for (const Verb& verb : registry) {
    CLI::App* sub = app.add_subcommand(verb.name, verb.help);
    runners[sub] = verb.setup(*sub);
    // Every verb that runs arms takes the per-call time limit of isolated plugin arms.
    if (sub->get_option_no_throw("--arm") || sub->get_option_no_throw("--arms") ||
        sub->get_option_no_throw("--pair") || verb.name == "mutants") {
      arm_timeout_options.push_back(
          sub->add_option("--arm-timeout", arm_timeout,
                          "a fixed number of seconds one call of an isolated plugin arm may take before its worker is "
                          "killed and the arm fails (default $QCONFORM_ARM_TIMEOUT, else a limit that follows the work: "
                          "the larger of 10 s and 50 x the arm's slowest time per multiply-add so far x the call's "
                          "multiply-adds; 120 s at least for loading and a first call; docs/plugins.md)")
              ->check(number_in(std::numeric_limits<double>::min(), 7 * 24 * 3600,
                                "a number of seconds > 0 and <= 604800 (one week)", "SECONDS")));
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    // CLI11 names what it refused; the nearest verb or flag is ours to suggest.
    if (code != 0) std::fputs(unknown_name_hints(app, argc, argv).c_str(), stderr);
    return code == 0 ? kExitOk : kExitBadInput;
  }

  try {
    for (const CLI::Option* option : arm_timeout_options) {
      if (option->count() > 0) qc::set_plugin_call_timeout(arm_timeout);
    }
    qc::dist::init(&argc, &argv);
    // Rank 0 alone writes the outputs of a job: it alone locks them (the other ranks are the same run).
    if (qc::dist::world().root()) {
      for (const auto& [sub, run] : runners) {
        if (sub->parsed()) qc::enable_output_locks("qconform " + sub->get_name());
      }
    }
  } catch (const qc::Error& e) {
    std::fprintf(stderr, "qconform: error: %s\n", e.what());
    return e.kind() == qc::ErrorKind::input ? kExitBadInput : kExitInternal;
  }
  const int code = run_verb(runners);
  qc::dist::finalize();
  // QC_EXIT_AT_ONCE=1 (a measurement, docs/performance.md): every output is written and closed by now; the
  // process ends without its static destructors and exit handlers (the CUDA runtime's teardown among
  // them), its lock files removed first and its streams flushed.
  if (qc::env_int("QC_EXIT_AT_ONCE", 0, 0, 1) != 0) {
    qc::release_output_locks();
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return code;
}
