/* The example arm's arithmetic (examples/plugin/example_arm.c: an int8 GEMM, then the
 * `vllm-triton` epilogue) with no formula declared: the plugin a user brings whose formula conform
 * must identify first (tests/unit/test_identify_conform.cpp, docs/identify.md "In conform").
 * Built with -DUNDECLARED_FAULT it also flips the last bit of every seventh output, which no
 * formula explains (identify: `unexplained`). */
#define QC_EXAMPLE_NO_ENTRY
#include "example_arm.c"

static int undeclared_run(void* ctx, const qc_arm_args_v1* args) {
  const int rc = example_run(ctx, args);
#ifdef UNDECLARED_FAULT
  for (int64_t e = 0; rc == 0 && e < args->m * args->n; e += 7) args->y[e] ^= 1u;
#endif
  return rc;
}

static const qc_arm_v1 kUndeclaredArm = {
    QC_ARM_ABI_VERSION,
    (uint32_t)sizeof(qc_arm_v1),
#ifdef UNDECLARED_FAULT
    "undeclared_arm: scalar C int8 GEMM (int32 acc) + an epilogue it does not name, every 7th output's last bit "
    "flipped, v1",
#else
    "undeclared_arm: scalar C int8 GEMM (int32 acc) + an epilogue it does not name, v1",
#endif
    NULL,
    QC_ARM_FLAG_WRITES_ACC,
    undeclared_run,
    NULL,
};

QC_ARM_EXPORT const qc_arm_v1* qc_arm_v1_entry(void) { return &kUndeclaredArm; }
