// The fields of an FP8 accumulation model as the measurement (c1_fp8_model.cpp) and identify see them:
// one spelling per behaviour (`canonical`), equality of behaviour, the printed value of each field,
// and each field's single-field alternatives for the evidence table (docs/accumulation.md).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qconform/accumulation.hpp"

namespace qc::fp8_fields {

// Parameters that do not act set to the defaults of the named models, so that equal behaviour has
// one spelling.
Fp8AccumModel canonical(Fp8AccumModel m);
// The measured fields in order (split_granule is not measured: identify's probes fit in one range).
std::array<int32_t, 11> key(const Fp8AccumModel& m);
bool same_spelling(const Fp8AccumModel& x, const Fp8AccumModel& y);  // key(x) == key(y)
bool same(const Fp8AccumModel& x, const Fp8AccumModel& y);           // the same behaviour (canonical keys)

// The fields of the evidence table, in its order.
std::span<const char* const> names();
// The printed value of field `f` of `m` ("0 (whole range)", "- (exact terms)", ...).
std::string value(const Fp8AccumModel& m, const std::string& f);
// The valid models that differ from `m` in field `f` alone (canonical, distinct, not `m`).
std::vector<Fp8AccumModel> alternatives(const Fp8AccumModel& m, const std::string& f);

}  // namespace qc::fp8_fields
