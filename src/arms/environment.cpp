#include "arms/environment.hpp"

#include <fmt/format.h>
#include <xmmintrin.h>

#include "core/version.hpp"
#include "qconform/accumulation.hpp"
#include "qconform/arm.hpp"

#ifdef QC_WITH_ONEDNN
#include <dnnl.h>
#endif

namespace qc {

nlohmann::json environment_stamp() {
  const unsigned csr = _mm_getcsr();
  nlohmann::json env = {{"cpu", cpu_description()},
                        {"compiler", build_flags()},
                        {"mxcsr", {{"ftz", (csr & 0x8000u) != 0}, {"daz", (csr & 0x0040u) != 0}}},
                        {"qconform", version()},
                        {"accumulator_target", accum_target_name()}};
#ifdef QC_WITH_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  env["onednn"] = fmt::format("{}.{}.{} ({})", v->major, v->minor, v->patch, v->hash);
#else
  env["onednn"] = "not in this build";
#endif
  return env;
}

}  // namespace qc
