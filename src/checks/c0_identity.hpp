// C0, the identity contract: the two runs share operands, model, prompts, config and engine, and
// the only difference is the declared treatment. The field-by-field join of two manifests is
// `join_manifest_fields` (src/manifest/manifest.cpp, docs/identity-contract.md); its field results
// decide the verdict here, and `join_manifest_json` / `join_manifests` (qconform/manifest.hpp) are
// the join with that verdict.
#pragma once

#include <string>

#include "qconform/check.hpp"
#include "qconform/manifest.hpp"

namespace qc {

// C0 from a join's field results: pass iff no field is a violation (fails closed). `treatment_change`
// names what the treatment changed for the summary ("A -> B; kernel x -> y"), or "".
CheckResult c0_identity(const JoinResult& join, const std::string& treatment_change);

}  // namespace qc
