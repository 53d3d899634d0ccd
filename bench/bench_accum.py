#!/usr/bin/env python3
"""Exact INT8 accumulator vs its named baseline, in one run, on the same operands.

Baseline: numpy/OpenBLAS float64 matmul (the paper's emulation method: int8 operands held
exactly in fp64; every |acc| < 2^53 is exact there). Ours: `bench_accum` (the C++ executable
built from bench/bench_accum.cpp), which times `qc::exact_accumulate_i32`, packing included.
Both take the best of several repetitions after a warm-up. The accumulators ours produced are
checked for exact equality against numpy's fp64 result, so the two timed computations are
known to produce the same numbers.

    python3 bench/bench_accum.py --build build-accum [--shapes 512x4096x4096,512x12288x4096]

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from the environment before numpy (and so
OpenBLAS) is loaded, so OpenBLAS picks its own kernel and cache sizes for this CPU.
"""
import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_var, None)  # before numpy loads OpenBLAS, for this process only

import numpy as np  # noqa: E402


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def blas_info():
    try:
        import threadpoolctl
        return threadpoolctl.threadpool_info()
    except ImportError:
        return "threadpoolctl not installed"


def time_numpy(a64, wt64, reps):
    """Best and median wall seconds of a64 @ wt64, and process CPU seconds / wall seconds."""
    np.matmul(a64, wt64)  # warm-up
    walls = []
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    for _ in range(reps):
        t0 = time.perf_counter()
        c = np.matmul(a64, wt64)
        walls.append(time.perf_counter() - t0)
    busy = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    walls.sort()
    return walls[0], walls[len(walls) // 2], busy, c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory containing bench/bench_accum")
    ap.add_argument("--shapes", default="512x4096x4096,512x12288x4096", help="MxNxK list")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="threads for ours (0 = all cores)")
    ap.add_argument("--target", default="", help="force a Highway target for ours (e.g. AVX3)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    exe = os.path.join(args.build, "bench", "bench_accum")
    if not os.access(exe, os.X_OK):
        sys.exit(f"{exe}: not found; build it with cmake --build {args.build} --target bench_accum")

    print(f"cpu: {cpu_model()}, {os.cpu_count()} logical CPUs; load average {os.getloadavg()}")
    print(f"numpy {np.__version__}; BLAS: {json.dumps(blas_info())}")
    rng = np.random.default_rng(args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            m, n, k = (int(x) for x in shape.lower().split("x"))
            a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
            w = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
            a_path, w_path, out_path = (os.path.join(tmp, f) for f in ("a.bin", "w.bin", "acc.bin"))
            a.tofile(a_path)
            w.tofile(w_path)

            # Baseline: fp64 matmul; the int8 -> fp64 conversion is not timed (favours the baseline).
            a64 = a.astype(np.float64)
            wt64 = w.astype(np.float64).T  # a view: OpenBLAS runs dgemm with the transposed operand
            np_best, np_median, np_busy, c64 = time_numpy(a64, wt64, args.reps)

            # Ours, same operands, same run.
            cmd = [exe, str(m), str(n), str(k), "--reps", str(args.reps), "--threads", str(args.threads),
                   "--a", a_path, "--w", w_path, "--out", out_path]
            if args.target:
                cmd += ["--target", args.target]
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            res = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if res.returncode != 0:
                sys.exit(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr}")
            ours = json.loads(res.stdout.strip().splitlines()[-1])
            ours_busy = ((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)) / wall

            acc = np.fromfile(out_path, dtype=np.int32).reshape(m, n)
            exact = bool(np.array_equal(acc.astype(np.int64), c64.astype(np.int64))) and bool(
                np.all(c64 == np.round(c64)))
            ops = 2.0 * m * n * k
            row = {
                "shape": f"{m}x{n}x{k}",
                "numpy_fp64_best_s": np_best, "numpy_fp64_median_s": np_median,
                "numpy_fp64_gflops": ops / np_best * 1e-9, "numpy_cpu_per_wall": np_busy,
                "ours_best_s": ours["best_s"], "ours_median_s": ours["median_s"], "ours_gops": ours["gops"],
                "ours_cpu_per_wall": ours_busy, "ours_target": ours["target"], "ours_threads": ours["threads"],
                "ratio_best": np_best / ours["best_s"], "ratio_median": np_median / ours["median_s"],
                "exact_match": exact,
            }
            rows.append(row)
            print(f"{row['shape']:>16}  numpy fp64 {np_best * 1e3:8.1f} ms ({row['numpy_fp64_gflops']:6.1f} GFLOPS, "
                  f"cpu/wall {np_busy:.2f})  ours {ours['best_s'] * 1e3:7.1f} ms ({ours['gops']:6.1f} GOPS, "
                  f"{ours['target']}, {ours['threads']} threads)  ratio {row['ratio_best']:.2f}x "
                  f"(median {row['ratio_median']:.2f}x)  exact match: {exact}")
    print(json.dumps({"bench": "accum_vs_numpy_fp64", "reps": args.reps, "rows": rows}))
    return 0 if all(r["exact_match"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
