/* The example arm's arithmetic (examples/plugin/example_arm.c: an int8 GEMM into an INT32
 * accumulator, then the declared `vllm-triton` epilogue) without its refusal of large K: at
 * K = 131072 of -128 x -128 the exact sum 2^31 leaves INT32 and this arm wraps around to -2^31
 * (two's complement, computed in uint32_t so the wrap is defined behaviour). The plugin that breaks
 * the contract "refuse K where INT32 can overflow" (docs/plugins.md): C1's overflow case must fail
 * and name that cause (tests/unit/test_interchangeability.cpp, tests/peer/test_verdict_cli.py). */
#define QC_EXAMPLE_NO_ENTRY
#include "example_arm.c" /* its bf16 conversions; `example_run` (which refuses large K) stays unused */

static int wrap_run(void* ctx, const qc_arm_args_v1* args) {
  (void)ctx;
  for (int64_t i = 0; i < args->m; ++i) {
    for (int64_t j = 0; j < args->n; ++j) {
      uint32_t sum = 0; /* INT32 arithmetic modulo 2^32: the wraparound nothing detects */
      for (int64_t kk = 0; kk < args->k; ++kk) {
        sum += (uint32_t)((int32_t)args->a_q[i * args->k + kk] * (int32_t)args->w_q[j * args->k + kk]);
      }
      int32_t acc;
      memcpy(&acc, &sum, sizeof acc);
      if (args->acc) args->acc[i * args->n + j] = acc;
      const float t = (float)acc * args->a_scale[i];
      uint16_t y = f32_to_bf16_rne(t * args->w_scale[j]);
      if (args->bias) y = f32_to_bf16_rne(bf16_to_f32(y) + bf16_to_f32(args->bias[j]));
      args->y[i * args->n + j] = y;
    }
  }
  if (args->acc) *args->acc_written = 1;
  return 0;
}

static const qc_arm_v1 kWrapArm = {
    QC_ARM_ABI_VERSION,
    (uint32_t)sizeof(qc_arm_v1),
    "wrap_arm: scalar C int8 GEMM, INT32 accumulator that wraps around at any K + vllm-triton epilogue, v1",
    "vllm-triton",
    QC_ARM_FLAG_WRITES_ACC,
    wrap_run,
    NULL,
    NULL,
};

QC_ARM_EXPORT const qc_arm_v1* qc_arm_v1_entry(void) { return &kWrapArm; }
