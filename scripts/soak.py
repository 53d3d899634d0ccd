#!/usr/bin/env python3
"""The soak of docs/hostile-inputs.md ("Soak"): long runs that would show a leak of memory, file
descriptors, mappings or files, with the resident memory and the open descriptors of the
qconform process sampled while it runs. Not part of `make test` (it takes tens of minutes).

  scripts/soak.py --qc build/qconform [--conform-runs 50] [--layers 560] [--m 16] [--out DIR] [--shared DIR]

1. `conform --model stories260K.bin --tokenizer tok512.bin` (../shared/models/stories260K) run
   --conform-runs times in a row into the same --out directory: per run the peak resident memory
   (VmRSS), the most open descriptors, the seconds, and the files left in the directory. SKIPPED
   (with the reason) when the model is absent.
2. `verify` of one sharded operand set of --layers layers in the pattern of Llama-3-70B's 80
   decoder layers (q, k, v, o, gate, up, down: 7 per decoder layer, GQA 8:1, intermediate 3.5x
   hidden) at 1/--scale of its width (default 8: hidden 1024, 1.1 GiB of operands at --m 256; the full
   width is 68 GB of weights, more than a build machine's disk), in shards of 64 MiB, with
   --resume (one journal file per layer): the process is sampled every 0.2 s from start to end.
Prints the figures as Markdown tables (the soak's record) and the commands it ran; exits 1 when a
figure is not flat: a run's median-or-later peak memory or descriptors more than 10 % (memory)
or 4 descriptors above the first half's, or, within the verify, the mean of the last quarter of
the samples above the second quarter's by the same margins; or files left behind (temporary files, locks, more outputs).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)


def sample(pid):
    """(VmRSS in KiB, open descriptors) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, StopIteration, PermissionError):
        return None


def run_sampled(cmd, log, period=0.2):
    """Runs cmd (stdout/stderr to `log`), sampling it every `period` s; returns (rc, seconds, samples)."""
    samples = []
    t0 = time.monotonic()
    with open(log, "ab") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        done = threading.Event()

        def watch():
            while not done.is_set():
                s = sample(p.pid)
                if s:
                    samples.append((time.monotonic() - t0, *s))
                done.wait(period)

        t = threading.Thread(target=watch)
        t.start()
        rc = p.wait()
        done.set()
        t.join()
    return rc, time.monotonic() - t0, samples


def listing(d):
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def soak_conform(qc, runs, work, shared, problems):
    model_dir = os.path.join(shared, "models", "stories260K")
    model, tok = os.path.join(model_dir, "stories260K.bin"), os.path.join(model_dir, "tok512.bin")
    if not (os.path.isfile(model) and os.path.isfile(tok)):
        print(f"SKIPPED conform soak: {model} or {tok} absent")
        return
    out = os.path.join(work, "conform-out")
    cmd = [qc, "conform", "--arms", "cpu:vllm-cutlass,cpu:vllm-triton", "--model", model, "--tokenizer", tok, "--out", out]
    print(f"conform soak: {runs} runs of\n    {' '.join(cmd)}\n")
    rows, first_files = [], None
    for i in range(1, runs + 1):
        rc, sec, s = run_sampled(cmd, os.path.join(work, "conform.log"))
        peak_rss = max(x[1] for x in s) if s else 0
        peak_fd = max(x[2] for x in s) if s else 0
        files = listing(out)
        hidden = [f for f in files if f.startswith(".")] + [f for f in listing(work) if ".qc-" in f]
        first_files = first_files or files
        rows.append((i, rc, sec, peak_rss, peak_fd, len(files), hidden))
        if rc not in (0, 1):
            problems.append(f"conform run {i}: exit {rc} (see {work}/conform.log)")
        if files != first_files or hidden:
            problems.append(f"conform run {i}: the output directory holds {files} (run 1: {first_files}), hidden {hidden}")
        print(f"  run {i:>2}: exit {rc}, {sec:6.1f} s, peak RSS {peak_rss / 1024:7.1f} MiB, peak fds {peak_fd:>3}, "
              f"{len(files)} files", flush=True)
    rss = [r[3] for r in rows]
    fds = [r[4] for r in rows]
    print("\n| conform runs | seconds (min / median / max) | peak RSS MiB (run 1 / min / max / run N) | peak fds (run 1 / min / max / run N) | files in --out |")
    print("|---|---|---|---|---|")
    secs = [r[2] for r in rows]
    print(f"| {len(rows)} | {min(secs):.1f} / {statistics.median(secs):.1f} / {max(secs):.1f} | "
          f"{rss[0] / 1024:.1f} / {min(rss) / 1024:.1f} / {max(rss) / 1024:.1f} / {rss[-1] / 1024:.1f} | "
          f"{fds[0]} / {min(fds)} / {max(fds)} / {fds[-1]} | {rows[-1][5]} (every run) |\n")
    # Sampled peaks are noisy (a 0.2 s sampler catches a transient peak in some runs, not in
    # others); growth shows as the later half's median above the first half's.
    half = len(rss) // 2 or 1
    early, late = statistics.median(rss[:half]), statistics.median(rss[half:] or rss)
    print(f"median peak RSS: runs 1-{half} {early / 1024:.1f} MiB, runs {half + 1}-{len(rss)} {late / 1024:.1f} MiB\n")
    if late > 1.10 * early:
        problems.append(f"conform peak RSS grew: median {early} KiB in the first half, {late} KiB in the second")
    if max(fds[half:] or fds) > max(fds[:half]) + 4:
        problems.append(f"conform peak fds grew: {max(fds[:half])} in the first half, {max(fds[half:])} in the second")


def llama3_70b_pattern(layers, m, scale):
    """MxNxK of `layers` layers in Llama-3-70B's order (q, k, v, o, gate, up, down) at 1/scale width."""
    h, inter, kv = 8192 // scale, 28672 // scale, 1024 // scale
    one = [(h, h), (kv, h), (kv, h), (h, h), (inter, h), (inter, h), (h, inter)]
    return ",".join(f"{m}x{n}x{k}" for i in range(layers) for n, k in [one[i % 7]])


def soak_verify(qc, layers, m, scale, work, problems):
    index = os.path.join(work, "ops.index.json")
    shapes = llama3_70b_pattern(layers, m, scale)
    synth = [qc, "synth", "--shapes", shapes, "--shard-size", "64M", "--out", index]
    print(f"sharded verify soak: {layers} layers, Llama-3-70B pattern at 1/{scale} width (hidden {8192 // scale}, "
          f"intermediate {28672 // scale}, kv {1024 // scale}), M = {m}\n"
          f"    {qc} synth --shapes <{layers} MxNxK> --shard-size 64M --out {index}")
    r = subprocess.run(synth, capture_output=True, text=True)
    if r.returncode != 0:
        problems.append(f"synth failed: {r.stdout}{r.stderr}")
        return
    shards = [f for f in listing(work) if f.endswith(".safetensors")]
    size = sum(os.path.getsize(os.path.join(work, f)) for f in shards)
    resume = os.path.join(work, "resume")
    cmd = [qc, "verify", index, "--arms", "cpu:vllm-cutlass,cpu:vllm-triton", "--scales", "real,pow2-channel,pow2-layer",
           "--resume", resume, "--json", os.path.join(work, "v.json")]
    print(f"    ({len(shards)} shards, {size / 2**20:.0f} MiB)\n    {' '.join(cmd)}\n")
    rc, sec, s = run_sampled(cmd, os.path.join(work, "verify.log"))
    if rc not in (0, 1) or not s:
        problems.append(f"verify: exit {rc}, {len(s)} samples (see {work}/verify.log)")
        return
    # The second quarter of the run against the last: the first quarter is the warm-up (the heap
    # grows to the working set of the largest layers and of the element-pass threads).
    n = len(s)
    tenth = max(1, n // 10)
    quarter = max(1, n // 4)
    second, last = s[quarter:2 * quarter], s[-quarter:]
    mean = lambda xs, i: sum(x[i] for x in xs) / len(xs)  # noqa: E731
    journal = [f for f in listing(resume) if f.startswith("layer-")]
    hidden = [f for f in listing(resume) if f.startswith(".")] + [f for f in listing(work) if ".qc-" in f]
    print("| verify | seconds | samples | RSS MiB (2nd quarter mean / last quarter mean / max) | fds (2nd quarter / last quarter / max) | journal files |")
    print("|---|---|---|---|---|---|")
    print(f"| {layers} layers, {len(shards)} shards | {sec:.0f} | {n} | {mean(second, 1) / 1024:.1f} / {mean(last, 1) / 1024:.1f} / "
          f"{max(x[1] for x in s) / 1024:.1f} | {mean(second, 2):.1f} / {mean(last, 2):.1f} / {max(x[2] for x in s)} | "
          f"{len(journal)} |\n")
    deciles = [s[d * tenth:(d + 1) * tenth] for d in range(10)]
    print("RSS MiB by tenth of the run: " + " ".join(f"{mean(d, 1) / 1024:.0f}" for d in deciles if d))
    print("fds by tenth of the run:     " + " ".join(f"{mean(d, 2):.1f}" for d in deciles if d) + "\n")
    if mean(last, 1) > 1.10 * mean(second, 1):
        problems.append(f"verify RSS grew: {mean(second, 1):.0f} -> {mean(last, 1):.0f} KiB")
    if mean(last, 2) > mean(second, 2) + 4:
        problems.append(f"verify fds grew: {mean(second, 2):.1f} -> {mean(last, 2):.1f}")
    if len(journal) != layers or hidden:
        problems.append(f"verify: {len(journal)} journal files of {layers}, hidden files {hidden}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qc", required=True)
    ap.add_argument("--conform-runs", type=int, default=50)
    ap.add_argument("--layers", type=int, default=560)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--scale", type=int, default=8, help="the verify's layers at 1/SCALE of Llama-3-70B's width")
    ap.add_argument("--out", help="work directory (default: a fresh one, removed at the end)")
    ap.add_argument("--shared", default=os.path.normpath(os.path.join(SRC, "..", "shared")),
                    help="the shared data directory holding models/stories260K (default: ../shared beside the checkout)")
    ap.add_argument("--skip-conform", action="store_true")
    ap.add_argument("--skip-verify", action="store_true")
    args = ap.parse_args()
    qc = os.path.abspath(args.qc)
    work = args.out or tempfile.mkdtemp(prefix="qc-soak-")
    os.makedirs(work, exist_ok=True)
    problems = []
    print(f"soak: {qc} ({subprocess.run([qc, '--version'], capture_output=True, text=True).stdout.strip()}), work "
          f"directory {work}, {os.cpu_count()} cores\n")
    if not args.skip_conform:
        soak_conform(qc, args.conform_runs, work, args.shared, problems)
    if not args.skip_verify:
        soak_verify(qc, args.layers, args.m, args.scale, work, problems)
    for p in problems:
        print(f"NOT FLAT: {p}")
    print(f"soak: {'FAILED' if problems else 'flat'}")
    if not args.out:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
