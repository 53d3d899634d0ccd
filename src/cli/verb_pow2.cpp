// `qconform pow2 IN OUT`: the power-of-two probe checkpoint. Every weight scale rounded to its
// nearest power of two (log2); weights and everything else byte-identical; IN never touched.
#include <fmt/format.h>

#include <memory>

#include "cli/cli.hpp"
#include "model/model.hpp"

namespace qc::cli {
namespace {

struct Pow2Args {
  std::string in, out;
};

VerbRunner setup_pow2(CLI::App& app) {
  auto a = std::make_shared<Pow2Args>();
  app.add_option("IN", a->in, "compressed-tensors checkpoint directory (or one .safetensors file)")->required();
  app.add_option("OUT", a->out, "output path (must not exist; written beside and renamed into place)")->required();
  return [a] {
    const Pow2Report r = pow2_checkpoint(a->in, a->out);
    fmt::print("pow2: {} scale tensors rewritten ({} scales, {} changed, {} already powers of two), {} tensors copied "
               "byte for byte\n",
               r.scale_tensors, r.scales, r.scales_changed, r.scales - r.scales_changed, r.tensors_copied);
    for (const auto& [path, digest] : r.inputs) fmt::print("  in   {}  {}\n", digest, path);
    for (const auto& [path, digest] : r.outputs) fmt::print("  out  {}  {}\n", digest, path);
    return kExitOk;
  };
}

RegisterVerb register_pow2{
    {"pow2", "Write the power-of-two probe checkpoint: every weight scale rounded to 2^k, all else byte-identical",
     110, setup_pow2}};

}  // namespace
}  // namespace qc::cli
