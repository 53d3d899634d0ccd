/* A whole FP8 layer as a plugin, written here with plain C arithmetic (no qconform code): e4m3fn
 * codes decoded by hand, a sequential fp32 sum over K (each add one rounding, -ffp-contract=off), and
 * a CUTLASS-style epilogue, the weight scale first: y = bf16(rn32(rn32(d * w_scale) * a_scale)), bf16
 * by round to nearest even. It declares neither an accumulation model nor an epilogue
 * (QC_ARM_FLAG_FP8_KERNEL alone): `qconform identify` must measure both
 * (tests/unit/test_identify_fp8.cpp). Built with -DFP8_WITH_GEMM it also offers its unscaled GEMM
 * (QC_ARM_FLAG_FP8_GEMM: `run` with `d` writes d). It takes no bias. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qconform/arm_abi.h"

static float e4m3_value(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const float v = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
  return (c & 0x80) ? -v : v;
}

static uint16_t bf16_rne(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu) != 0) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static float dot(const qc_arm_args_v1* args, int64_t i, int64_t j) {
  const uint8_t* a = (const uint8_t*)args->a_q + i * args->k;
  const uint8_t* w = (const uint8_t*)args->w_q + j * args->k;
  float acc = 0.0f;
  for (int64_t k = 0; k < args->k; ++k) acc = acc + e4m3_value(a[k]) * e4m3_value(w[k]);
  return acc;
}

static int fp8_kernel_run(void* ctx, const qc_arm_args_v1* args) {
  (void)ctx;
  if (args->struct_size >= offsetof(qc_arm_args_v1, d) + sizeof(float*) && args->d != NULL) {
#ifdef FP8_WITH_GEMM
    for (int64_t i = 0; i < args->m; ++i) {
      for (int64_t j = 0; j < args->n; ++j) args->d[i * args->n + j] = dot(args, i, j);
    }
    return 0;
#else
    snprintf(args->error, args->error_size, "fp8_kernel_arm: no unscaled entry");
    return 1;
#endif
  }
  if (args->bias != NULL) {
    snprintf(args->error, args->error_size, "fp8_kernel_arm takes no bias");
    return 1;
  }
  for (int64_t i = 0; i < args->m; ++i) {
    for (int64_t j = 0; j < args->n; ++j) {
      const float t = dot(args, i, j) * args->w_scale[j];
      args->y[i * args->n + j] = bf16_rne(t * args->a_scale[i]);
    }
  }
  return 0;
}

static const qc_arm_v1 kFp8KernelArm = {
    QC_ARM_ABI_VERSION,
    (uint32_t)sizeof(qc_arm_v1),
    "fp8_kernel_arm: scalar C e4m3 GEMM (sequential fp32) + a CUTLASS-order epilogue, v1",
    NULL,
#ifdef FP8_WITH_GEMM
    QC_ARM_FLAG_FP8_KERNEL | QC_ARM_FLAG_FP8_GEMM,
#else
    QC_ARM_FLAG_FP8_KERNEL,
#endif
    fp8_kernel_run,
    NULL,
    NULL,
};

QC_ARM_EXPORT const qc_arm_v1* qc_arm_v1_entry(void) { return &kFp8KernelArm; }
