/* An example qconform arm plugin: a plain-C scalar INT8 GEMM with the `vllm-triton` epilogue.
 *
 * a_q [m,k] row-major int8, w_q [n,k] row-major int8 (W^T as column-major), y [m,n] bf16.
 *   acc    = sum_k a_q[m,k] * w_q[n,k]                 (int32, exact: |acc| <= k * 2^14 < 2^31)
 *   y      = bf16( rn32( rn32( f32(acc) * sa[m] ) * sw[n] ) )   activation scale first
 *   y_bias = bf16( f32(y) + f32(bias[n]) )              bias added AFTER the bf16 rounding
 * Every fp32 operation rounds once: build with -ffp-contract=off (no FMA contraction), never
 * with -ffast-math.
 *
 * Build and load (see docs/plugins.md):
 *   cc -std=c99 -O2 -fPIC -shared -ffp-contract=off -Iinclude examples/plugin/example_arm.c \
 *      -o libqconform_example_arm.so
 *   qconform synth --shapes tiny --m 64 --out ops.safetensors
 *   qconform verify ops.safetensors --arms cpu:vllm-cutlass,plugin:./libqconform_example_arm.so
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "qconform/arm_abi.h"

/* fp32 -> bf16 bit pattern, round to nearest, ties to even.
 * 1. NaN stays NaN: keep sign and top payload bits, set the quiet bit.
 * 2. Otherwise add 0x7FFF plus the lowest kept bit and truncate; a carry out of the mantissa
 *    moves into the exponent, which rounds the largest finite values up to infinity. */
static uint16_t f32_to_bf16_rne(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static float bf16_to_f32(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static int example_run(void* ctx, const qc_arm_args_v1* args) {
  (void)ctx;
  if (args->struct_size < sizeof(qc_arm_args_v1)) {
    snprintf(args->error, args->error_size, "example_arm: args struct_size %u < %zu", (unsigned)args->struct_size,
             sizeof(qc_arm_args_v1));
    return 1;
  }
  if (args->k > 131071) {
    /* Beyond K * 2^14 < 2^31 an int32 accumulator could overflow: refuse rather than wrap. */
    snprintf(args->error, args->error_size,
             "example_arm: k=%lld exceeds 131071: the INT32 accumulator could overflow (refused, not wrapped)",
             (long long)args->k);
    return 2;
  }
  for (int64_t i = 0; i < args->m; ++i) {
    const int8_t* a_row = args->a_q + i * args->k;
    for (int64_t j = 0; j < args->n; ++j) {
      const int8_t* w_row = args->w_q + j * args->k;
      int32_t acc = 0;
      for (int64_t kk = 0; kk < args->k; ++kk) acc += (int32_t)a_row[kk] * (int32_t)w_row[kk];
      if (args->acc) args->acc[i * args->n + j] = acc;
      const float t = (float)acc * args->a_scale[i]; /* rn32(f32(acc) * sa) */
      const float u = t * args->w_scale[j];          /* rn32(t * sw) */
      uint16_t y = f32_to_bf16_rne(u);
      if (args->bias) {
        const float v = bf16_to_f32(y) + bf16_to_f32(args->bias[j]); /* rn32(f32(bf16) + bias) */
        y = f32_to_bf16_rne(v);
      }
      args->y[i * args->n + j] = y;
    }
  }
  if (args->acc) *args->acc_written = 1;
  return 0;
}

/* QC_EXAMPLE_NO_ENTRY: the test plugins of tests/hostile/plugins include this file for its
 * correct `example_run` and export their own descriptor. */
#ifndef QC_EXAMPLE_NO_ENTRY
static const qc_arm_v1 kExampleArm = {
    QC_ARM_ABI_VERSION,
    (uint32_t)sizeof(qc_arm_v1),
    "example_arm: scalar C int8 GEMM (int32 acc) + vllm-triton epilogue, v1",
    "vllm-triton",
    QC_ARM_FLAG_WRITES_ACC,
    example_run,
    NULL,
    NULL, /* accumulation_model: none, an INT8 arm */
};

QC_ARM_EXPORT const qc_arm_v1* qc_arm_v1_entry(void) { return &kExampleArm; }
#endif
