// The process world of a build without MPI: one process. A launcher that starts several copies of
// this binary would have each run the whole job and write the same outputs, so that is refused.
#include <cstdlib>
#include <string>

#include "dist/dist.hpp"
#include "qconform/error.hpp"

namespace qc::dist {

namespace {
World g_world;
}

void init(int*, char***) {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"}) {
    const char* v = std::getenv(var);
    if (v == nullptr) continue;
    const std::string size = v;
    const bool several = !size.empty() && size != "1" && size != "0";
    QC_INPUT(!several,
             "this qconform was built without MPI (configure found none: QCONFORM_WITH_MPI) but was started as one of "
             "{} ranks ({}={}): each would run the whole job; rebuild with MPI (openmpi-bin libopenmpi-dev) or run one "
             "process",
             size, var, size);
  }
}
void finalize() {}
[[noreturn]] void abort_job(int code) { std::exit(code); }
const World& world() { return g_world; }
std::string description() { return "none (built without MPI)"; }
bool built_with_mpi() { return false; }
std::vector<std::string> gather(const std::string& mine) { return {mine}; }
std::string broadcast(const std::string& text) { return text; }

}  // namespace qc::dist
