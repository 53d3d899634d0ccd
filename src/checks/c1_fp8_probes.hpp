// The designed probes of the FP8 accumulation-model measurement (c1_fp8_probes.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "checks/c1_fp8_model.hpp"

namespace qc {

// The structure, kept-bits, cancel, alignment, steps, promotion and random probes (the table of
// docs/accumulation.md, "Measuring an arm's model"); `seed` draws the random ones.
std::vector<Fp8Probe> design_fp8_probes(uint64_t seed);

// K of the structure and promotion probes: promotion and split boundaries up to 512 products apart.
inline constexpr int64_t kFp8LongK = 1024;

// For an arm observed through its bf16 (or fp16) output, where the 24 bits of `d` do not survive:
// each designed probe again with its largest term cancelled at the end (K + 32, the negated term at
// position K + 31, after every step and chain the probe has), so that `d` is what the probe's small
// terms left, a value of a few significant bits that survives any conversion to bf16 or fp16 exactly
// (docs/identify.md, "FP8 arms"). The random probes have no variant.
std::vector<Fp8Probe> readable_fp8_variants(const std::vector<Fp8Probe>& probes);

}  // namespace qc
