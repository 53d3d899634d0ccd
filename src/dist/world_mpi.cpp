// The process world on MPI (builds with QCONFORM_WITH_MPI): the C API only, blocking collectives
// on MPI_COMM_WORLD. MPI is started only when a launcher started the process, so the same binary
// run by hand is one process and never touches MPI (no singleton start, which needs a runtime
// daemon on some systems).
// The C API only: mpi.h would otherwise pull in the deprecated C++ bindings (and their library).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <fmt/format.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist/dist.hpp"
#include "qconform/error.hpp"
#include "core/parallel.hpp"

namespace qc::dist {

namespace {

World g_world;
bool g_started = false;

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  QC_FAIL("{} failed: {}", call, std::string(text, static_cast<size_t>(len)));
}

}  // namespace

void init(int* argc, char*** argv) {
  if (g_started || !launched_by_mpi()) return;
  check(MPI_Init(argc, argv), "MPI_Init");
  g_started = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world.size);
  MPI_Comm local;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world.rank, MPI_INFO_NULL, &local),
        "MPI_Comm_split_type");
  MPI_Comm_rank(local, &g_world.local_rank);
  MPI_Comm_size(local, &g_world.local_size);
  MPI_Comm_free(&local);
  // Ranks on one host share its cores: each takes an equal part (at least one thread).
  if (g_world.local_size > 1) set_thread_share(std::max(1, hardware_threads() / g_world.local_size));
}

void finalize() {
  if (!g_started) return;
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

[[noreturn]] void abort_job(int code) {
  if (g_started) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

const World& world() { return g_world; }

std::string description() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, static_cast<size_t>(len));
  if (const size_t comma = v.find(','); comma != std::string::npos) v.resize(comma);  // "Open MPI v4.1.4"
  return fmt::format("{}, {} rank{}", v, g_world.size, g_world.size == 1 ? "" : "s");
}

bool built_with_mpi() { return true; }

std::vector<std::string> gather(const std::string& mine) {
  if (!g_started || g_world.size == 1) return {mine};
  QC_CHECK(mine.size() < static_cast<size_t>(INT_MAX), "dist::gather: {} bytes exceed one MPI message", mine.size());
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(g_world.size), 0), offsets(static_cast<size_t>(g_world.size), 0);
  check(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  std::string all;
  if (g_world.root()) {
    size_t total = 0;
    for (size_t r = 0; r < lens.size(); ++r) {
      QC_CHECK(total + static_cast<size_t>(lens[r]) < static_cast<size_t>(INT_MAX),
               "dist::gather: the ranks' results exceed one MPI message");
      offsets[r] = static_cast<int>(total);
      total += static_cast<size_t>(lens[r]);
    }
    all.resize(total);
  }
  check(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD),
        "MPI_Gatherv");
  if (!g_world.root()) return {};
  std::vector<std::string> parts;
  for (size_t r = 0; r < lens.size(); ++r) parts.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(lens[r])));
  return parts;
}

std::string broadcast(const std::string& text) {
  if (!g_started || g_world.size == 1) return text;
  QC_CHECK(text.size() < static_cast<size_t>(INT_MAX), "dist::broadcast: {} bytes exceed one MPI message", text.size());
  int len = static_cast<int>(text.size());
  check(MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  std::string out = g_world.root() ? text : std::string(static_cast<size_t>(len), '\0');
  check(MPI_Bcast(out.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return out;
}

}  // namespace qc::dist
