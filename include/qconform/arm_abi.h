/* qconform arm plugin ABI, version 1: a shared library that implements one scaled-INT8 linear
 * layer, loaded by qconform as the arm `plugin:<path.so>`.
 *
 * Pure C (C99), no qconform header needed beyond this one. Layouts: a_q [m,k] row-major int8,
 * w_q [n,k] row-major int8 (W^T as column-major), a_scale [m] fp32 (per token), w_scale [n]
 * fp32 (per output channel), bias [n] bf16 bit patterns or NULL, y [m,n] row-major bf16 bit
 * patterns, acc [m,n] row-major int32 or NULL.
 *
 * The library exports one function, `qc_arm_v1_entry` (see QC_ARM_V1_ENTRY_SYMBOL), returning
 * a pointer to a `qc_arm_v1` that stays valid until the library is unloaded. qconform checks
 * `abi_version == QC_ARM_ABI_VERSION`, `struct_size >= QC_ARM_V1_MIN_SIZE`, a non-empty `name`
 * and a non-NULL `run` before it calls anything else. Later versions only append fields to both
 * structs; `struct_size` tells each side how much the other knows (a plugin built against an
 * older header, whose struct ends before a field, simply does not have it).
 *
 * FP8 plugins (appended fields, qconform 0.5+): a plugin that sets `accumulation_model` (a model
 * name of docs/accumulation.md, e.g. "hopper-fp8-chain") is an FP8 arm. qconform then calls `run`
 * with `args->d` non-NULL: `a_q` [m,k] and `w_q` [n,k] hold e4m3fn codes (bit patterns; read them
 * as uint8_t), and the plugin writes d [m,n] fp32, the unscaled GEMM sum_k a[m,k]*w[n,k] as its
 * kernel accumulates it; `a_scale`, `w_scale`, `bias`, `y` and `acc` are NULL on such a call
 * (qconform applies the `fp8-scaled` epilogue itself).
 *
 * FP8 plugins without a declaration (flags, qconform 0.6+): QC_ARM_FLAG_FP8_KERNEL makes `run` a whole
 * FP8 layer: with `args->d == NULL` it receives e4m3fn codes in `a_q` and `w_q`, the layer's scales and
 * bias, and writes y bf16 [m,n], its epilogue its own (`epilogue`: a formula over the fp32 GEMM result
 * `d`, e.g. "bf16(rn32(sa * rn32(d * sw)))", or NULL). QC_ARM_FLAG_FP8_GEMM says that `run` with
 * `args->d != NULL` computes the unscaled d (implied by `accumulation_model`). Without a model the
 * plugin's model (and a kernel's epilogue) are unknown until `qconform identify` measures them.
 *
 * Block-scaled FP8 plugins (appended fields, ABI revision 3): a plugin whose `accumulation_model` is a
 * block model ("block-triton", "block-deepgemm", ...; docs/accumulation.md) is a block-scaled FP8 arm.
 * qconform then calls `run` on block-scaled layers only, with `args->d` non-NULL and `args->block_k` > 0:
 * `a_q` [m,k] and `w_q` [n,k] e4m3fn codes, `a_scale` [m, a_scale_cols] and `w_scale`
 * [ceil(n / w_block_rows), w_scale_cols] fp32 row-major (one scale per token and K block, per block of
 * w_block_rows weight rows and K block; a_scale_cols or w_scale_cols 1: one per row for every block),
 * and the plugin writes d [m,n] fp32, its accumulator D with the scales applied, before any rounding to
 * bf16 (qconform rounds it, RNE). `bias`, `y` and `acc` are NULL. `block_k`/`block_n` of the descriptor
 * declare the one scale block the kernel takes (0: any); layers with another are refused before `run`.
 * QC_ARM_FLAG_FP8_BLOCK without an `accumulation_model` makes the same block-scaled plugin with its block
 * model unknown until `qconform identify` measures it (its blocks, per-block chain and promotion form).
 *
 * Revisions (all ABI version 1; each only appends): 1 INT8 arms; 2 FP8 arms (`d`, `accumulation_model`);
 * 3 block-scaled FP8 arms (the block fields of both structs). The flags QC_ARM_FLAG_FP8_KERNEL and
 * QC_ARM_FLAG_FP8_GEMM (undeclared FP8 plugins) are bits of the existing `flags` field. Full guide:
 * docs/plugins.md.
 */
#ifndef QCONFORM_ARM_ABI_H
#define QCONFORM_ARM_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QC_ARM_ABI_VERSION 1u
#define QC_ARM_ABI_REVISION 3u /* the newest revision this header describes (see above) */
#define QC_ARM_V1_ENTRY_SYMBOL "qc_arm_v1_entry"

/* `qc_arm_v1.flags`: the plugin writes the INT32 accumulator when `acc` is non-NULL (and then
 * sets `*acc_written = 1`). qconform then exposes it to check C4. */
#define QC_ARM_FLAG_WRITES_ACC 0x1u
/* An FP8 kernel: `run` with `d == NULL` takes e4m3fn codes with scales and bias, writes y (above). */
#define QC_ARM_FLAG_FP8_KERNEL 0x2u
/* An FP8 GEMM: `run` with `d != NULL` writes the unscaled fp32 d (above). */
#define QC_ARM_FLAG_FP8_GEMM 0x4u
/* A block-scaled FP8 plugin that declares no block model: `run` on block-scaled layers writes D (above). */
#define QC_ARM_FLAG_FP8_BLOCK 0x8u

/* The arguments of one call. Every pointer is valid for the whole call; the plugin may use
 * threads internally but must have finished writing `y` and `acc` when `run` returns. */
typedef struct qc_arm_args_v1 {
  uint32_t struct_size; /* sizeof(qc_arm_args_v1) as the caller knows it */
  uint32_t reserved;    /* 0 */
  int64_t m, n, k;      /* all >= 1 */
  const int8_t* a_q;    /* [m,k] */
  const float* a_scale; /* [m], finite and > 0 */
  const int8_t* w_q;    /* [n,k] */
  const float* w_scale; /* [n], finite and > 0 */
  const uint16_t* bias; /* [n] bf16, NULL when the layer has no bias */
  uint16_t* y;          /* [m,n] bf16 out; every element must be written */
  int32_t* acc;         /* [m,n] int32 out, or NULL when the caller does not want it */
  int* acc_written;     /* never NULL; set *acc_written = 1 after filling `acc`, else leave 0 */
  char* error;          /* on failure, a NUL-terminated message of at most error_size bytes */
  size_t error_size;
  /* Appended (FP8 plugins); present when struct_size >= offsetof(qc_arm_args_v1, d) + sizeof(float*),
   * which every qconform that calls an FP8 plugin passes. */
  float* d; /* FP8 calls: [m,n] fp32 out, every element must be written; NULL on INT8 calls */
  /* Appended (block-scaled FP8 plugins, revision 3); present when struct_size >=
   * QC_ARM_ARGS_V1_BLOCK_SIZE, which every qconform that calls a block-scaled plugin passes. 0 on every
   * call that is not block-scaled. */
  int64_t block_k;      /* K columns per scale (the K block; the last block may be shorter) */
  int64_t a_scale_cols; /* columns of a_scale: ceil(k / block_k) per token group, 1 per token */
  int64_t w_block_rows; /* rows of w_q per row of w_scale: b_n per block, 1 per channel */
  int64_t w_scale_cols; /* columns of w_scale: ceil(k / block_k) per block, 1 per channel */
} qc_arm_args_v1;

/* The size of qc_arm_args_v1 up to its block fields (revision 3). */
#define QC_ARM_ARGS_V1_BLOCK_SIZE (offsetof(qc_arm_args_v1, w_scale_cols) + sizeof(int64_t))

typedef struct qc_arm_v1 {
  uint32_t abi_version; /* QC_ARM_ABI_VERSION */
  uint32_t struct_size; /* sizeof(qc_arm_v1) */
  const char* name;     /* identity of the kernel that runs (recorded as the RunRecord `kernel`) */
  const char* epilogue; /* declared formula name ("vllm-triton", ...; see `qconform arms`) or NULL */
  uint64_t flags;       /* QC_ARM_FLAG_* */
  /* Computes y (and acc when asked). Returns 0 on success; non-zero on failure, after writing a
   * message into args->error. Must not call exit() or abort(). */
  int (*run)(void* ctx, const qc_arm_args_v1* args);
  void* ctx; /* passed back to run() unchanged */
  /* Appended (FP8 plugins); read only when struct_size covers it. */
  const char* accumulation_model; /* the FP8 accumulation model the kernel follows, or NULL (an INT8 arm) */
  /* Appended (block-scaled FP8 plugins, revision 3); read only when struct_size covers them. */
  int64_t block_k; /* the K block of the scales the kernel takes (0: any) */
  int64_t block_n; /* the weight rows per scale row it takes (0: any) */
} qc_arm_v1;

/* The size of the first qc_arm_v1 (up to `ctx`): the least `struct_size` qconform accepts. */
#define QC_ARM_V1_MIN_SIZE (offsetof(qc_arm_v1, ctx) + sizeof(void*))

typedef const qc_arm_v1* (*qc_arm_v1_entry_fn)(void);

#if defined(__GNUC__) || defined(__clang__)
#define QC_ARM_EXPORT __attribute__((visibility("default")))
#else
#define QC_ARM_EXPORT
#endif

/* The one symbol a plugin exports (declared here so the plugin's definition is type-checked). */
QC_ARM_EXPORT const qc_arm_v1* qc_arm_v1_entry(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* QCONFORM_ARM_ABI_H */
