// The environment stamp: what a run's numbers depend on besides its inputs and its arm, recorded
// in every manifest (check C0 compares it leaf by leaf, docs/identity-contract.md) and in the
// boundary results (C1).
//
// It lives with the arms, not in core: it reports the CPU the arms run on (`cpu_description`),
// the accumulator kernel Highway dispatched to and the oneDNN library, all of which sit at or
// below this layer, so both of its users (checks/c1_boundary.cpp, manifest/manifest.cpp) import down.
#pragma once

#include <nlohmann/json.hpp>

namespace qc {

// {cpu, compiler, mxcsr {ftz, daz}, qconform, accumulator_target, onednn}: CPU model and ISA,
// compiler and numeric flags, this thread's MXCSR FTZ/DAZ bits, project version, the exact
// accumulator's Highway target, and the oneDNN version ("not in this build" without it).
nlohmann::json environment_stamp();

}  // namespace qc
