/* A block-scaled FP8 plugin that declares no block model (QC_ARM_FLAG_FP8_BLOCK, no accumulation_model):
 * DeepGEMM's promotion written from its description (../shared/reference/block-fp8-and-cutlass.md), not
 * from qconform's block model: per K block the exact sum of the e4m3 products (in double: at most 128
 * products, each a multiple of 2^-18 below 2^18, fewer than 53 bits in all) rounded once to fp32, then
 * scale = sa * sb (fp32) and D = fmaf(scale, C, D). conform must identify it first
 * (tests/unit/test_conform_block_identify.cpp): `block-deepgemm+exact`. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "qconform/arm_abi.h"

/* e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; subnormals at exponent 0; 0x7F/0xFF are NaN. */
static double e4m3(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 0xF, m = c & 7;
  const double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
  return s ? -v : v;
}

static int block_run(void* ctx, const qc_arm_args_v1* args) {
  (void)ctx;
  if (args->d == NULL || args->block_k <= 0) {
    snprintf(args->error, args->error_size, "a block-scaled plugin: expected a block-scaled FP8 call");
    return 1;
  }
  const uint8_t* a = (const uint8_t*)args->a_q;
  const uint8_t* w = (const uint8_t*)args->w_q;
  for (int64_t i = 0; i < args->m; ++i) {
    for (int64_t j = 0; j < args->n; ++j) {
      float d = 0.0f;
      for (int64_t k0 = 0, b = 0; k0 < args->k; k0 += args->block_k, ++b) {
        const int64_t k1 = k0 + args->block_k < args->k ? k0 + args->block_k : args->k;
        double sum = 0.0;
        for (int64_t k = k0; k < k1; ++k) sum += e4m3(a[i * args->k + k]) * e4m3(w[j * args->k + k]);
        const float c = (float)sum;
        const float sa = args->a_scale[i * args->a_scale_cols + (args->a_scale_cols == 1 ? 0 : b)];
        const float sb = args->w_scale[(j / args->w_block_rows) * args->w_scale_cols + (args->w_scale_cols == 1 ? 0 : b)];
        const float scale = sa * sb;
        d = fmaf(scale, c, d);
      }
      args->d[i * args->n + j] = d;
    }
  }
  return 0;
}

static const qc_arm_v1 kBlockArm = {
    QC_ARM_ABI_VERSION,
    (uint32_t)sizeof(qc_arm_v1),
    "undeclared_block_arm: scalar C block-scaled e4m3 GEMM, exact per-block sums, DeepGEMM's promotion, v1",
    NULL,
    QC_ARM_FLAG_FP8_BLOCK,
    block_run,
    NULL,
    NULL, /* no accumulation model: identify measures it */
    128,
    128,
};

QC_ARM_EXPORT const qc_arm_v1* qc_arm_v1_entry(void) { return &kBlockArm; }
