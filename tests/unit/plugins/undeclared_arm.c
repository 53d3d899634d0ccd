/* The example arm's arithmetic (examples/plugin/example_arm.c: an int8 GEMM, then the
 * `vllm-triton` epilogue) with no formula declared: the plugin a user brings whose formula conform
 * must identify first (tests/unit/test_identify_conform.cpp, docs/identify.md "conform"). */
#define QC_EXAMPLE_NO_ENTRY
#include "example_arm.c"

static const qc_arm_v1 kUndeclaredArm = {
    QC_ARM_ABI_VERSION,
    (uint32_t)sizeof(qc_arm_v1),
    "undeclared_arm: scalar C int8 GEMM (int32 acc) + an epilogue it does not name, v1",
    NULL,
    QC_ARM_FLAG_WRITES_ACC,
    example_run,
    NULL,
};

QC_ARM_EXPORT const qc_arm_v1* qc_arm_v1_entry(void) { return &kUndeclaredArm; }
