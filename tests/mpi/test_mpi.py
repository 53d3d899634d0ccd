#!/usr/bin/env python3
"""Multi-rank runs (ctest label `mpi`): merged results equal the single-process ones (verify, predict,
generate, replay, conform, invariance --tp), faults fail the job with nothing merged, `--resume` finishes a killed job with the
same result.

Usage: test_mpi.py QCONFORM_BINARY. Exits 77 (ctest: SKIPPED) with the reason when mpirun is absent
or the binary was built without MPI. Runs as root in CI: Open MPI is told that is allowed.
"""
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

QC = pathlib.Path(sys.argv[1]).resolve()
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
ARMS = "cpu:vllm-cutlass,cpu:vllm-triton"
TIMING = ("seconds", "wall_seconds")
failures = []


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(77)


def run(args, check=True, env=None, **kw):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env or ENV, **kw)
    if check and p.returncode != 0:
        raise SystemExit(f"FAILED: {' '.join(map(str, args))} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def mpirun(n):
    return ["mpirun", "--oversubscribe", "-n", str(n)]


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def without_timings(path):
    """The file's text with the timing fields' values blanked (the only fields allowed to differ)."""
    text = pathlib.Path(path).read_text()
    text = re.sub(r'"seconds": \[[^\]]*\]', '"seconds": null', text)
    return re.sub(r'"wall_seconds": [-0-9.e+]+', '"wall_seconds": null', text)


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines())):
        if x != y:
            return f"line {i + 1}: single {x!r} vs multi {y!r}"
    return f"lengths {len(a)} vs {len(b)}"


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = pathlib.Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out


def rank_pid(mpirun_pid, rank):
    """The pid of the qconform process of `rank` under this mpirun (from its environment)."""
    for pid in descendants(mpirun_pid):
        try:
            env = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if exe == str(QC) and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return pid
    return None


def main():
    if shutil.which("mpirun") is None:
        skip("mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)")
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="qc-mpi-"))
    ops = tmp / "ops.safetensors"
    run([QC, "synth", "--shapes", "tiny", "--m", "48", "--seed", "7", "--out", ops])
    probe = run(mpirun(2) + [QC, "predict", ops, "--out", tmp / "probe.json", "--quiet"], check=False)
    if "built without MPI" in probe.stderr:
        skip("this qconform was built without MPI (QCONFORM_WITH_MPI found none)")
    if probe.returncode != 0:
        raise SystemExit(f"FAILED: mpirun cannot start qconform:\n{probe.stdout}\n{probe.stderr}")

    # 1. predict and verify: merged results equal the single process's, for R = 1, 2, 3.
    run([QC, "predict", ops, "--out", tmp / "pred-1p.json", "--quiet"])
    run([QC, "verify", ops, "--arms", ARMS, "--json", tmp / "single.json"], check=False)
    single = without_timings(tmp / "single.json")
    check(len(json.loads(single)["runs"]) == 14 * 3, "single-process verify ran 14 layers x 3 scale regimes")
    for r in (1, 2, 3):
        run(mpirun(r) + [QC, "predict", ops, "--out", tmp / f"pred-{r}.json", "--quiet"])
        same = (tmp / f"pred-{r}.json").read_bytes() == (tmp / "pred-1p.json").read_bytes()
        check(same, f"predict on {r} rank(s): predictions file byte-identical to one process")
        p = run(mpirun(r) + [QC, "verify", ops, "--arms", ARMS, "--json", tmp / f"verify-{r}.json"], check=False)
        check(p.returncode in (0, 1), f"verify on {r} rank(s) finished (exit {p.returncode}) {p.stderr[-300:]}")
        multi = without_timings(tmp / f"verify-{r}.json")
        check(multi == single, f"verify on {r} rank(s): JSON byte-identical to one process except timings"
              + ("" if multi == single else " -- " + first_difference(single, multi)))

    # 1b. An FP8 pair (ulp histograms many bins wide): one process keeps the layers' results in memory;
    # two ranks and --resume carry them through the per-layer JSON. Both give the one process's file.
    f8 = tmp / "f8.safetensors"
    run([QC, "synth", "--shapes", "tiny", "--m", "16", "--seed", "3", "--element", "e4m3", "--out", f8])
    fp8_arms = "cpu:fp8-hopper-fp8-chain,cpu:fp8-hopper-fp8-promote4"
    run([QC, "verify", f8, "--arms", fp8_arms, "--json", tmp / "f8-single.json"], check=False)
    f8_single = without_timings(tmp / "f8-single.json")
    doc = json.loads(f8_single)
    check("fp8" in doc and doc["total_real"]["bitwise_diff"] > 0 and len(doc["total_real"]["ulp_histogram"]) > 2,
          "single-process FP8 verify: the two Hopper models differ, over more than two ulp distances")
    for name, prefix, extra in (("2 ranks", mpirun(2), []), ("--resume", [], ["--resume", tmp / "f8-resume"])):
        out = tmp / f"f8-{len(extra)}.json"
        p = run(prefix + [QC, "verify", f8, "--arms", fp8_arms, "--json", out] + extra, check=False)
        check(p.returncode in (0, 1), f"FP8 verify with {name} finished (exit {p.returncode}) {p.stderr[-300:]}")
        other = without_timings(out)
        check(other == f8_single, f"FP8 verify with {name}: JSON byte-identical to one process in memory"
              + ("" if other == f8_single else " -- " + first_difference(f8_single, other)))

    # 2. A sharded set verifies to the same runs and checks as the single file, on 2 ranks.
    index = tmp / "sharded" / "ops.index.json"
    index.parent.mkdir()
    run([QC, "synth", "--shapes", "tiny", "--m", "48", "--seed", "7", "--shard-size", "200K", "--out", index])
    shards = sorted(index.parent.glob("ops-*.safetensors"))
    check(len(shards) > 2, f"--shard-size 200K wrote {len(shards)} shards")
    run(mpirun(2) + [QC, "verify", index, "--arms", ARMS, "--json", tmp / "sharded.json"], check=False)
    a, b = json.loads(single), json.loads(without_timings(tmp / "sharded.json"))
    check(a["runs"] == b["runs"] and a["checks"] == b["checks"] and a["total_real"] == b["total_real"],
          "sharded set on 2 ranks: the same runs, checks and totals as the single file")

    # 3. A rank that fails (a shard changed after its index was written) fails the job with the
    # rank, the layer and the reason; nothing is written.
    bad = tmp / "bad"
    shutil.copytree(index.parent, bad)
    last = sorted(bad.glob("ops-*.safetensors"))[-1]
    data = bytearray(last.read_bytes())
    data[-1] ^= 0x01
    last.write_bytes(bytes(data))
    out = tmp / "bad.json"
    p = run(mpirun(2) + [QC, "verify", bad / "ops.index.json", "--arms", ARMS, "--json", out], check=False)
    check(p.returncode == 2, f"a changed shard fails the 2-rank job with exit 2 (found {p.returncode})")
    check(re.search(r"rank \d of 2, layer \d+ `[^`]+`: .*shard .*expected sha256:", p.stderr) is not None,
          f"the error names the rank, the layer and the reason: {p.stderr.strip()[:300]}")
    check(not out.exists() and not list(tmp.glob("bad.json*")), "no merged output is written")

    # An error on one rank outside the shared work (here its GPU assignment) ends the job at once
    # (MPI_Abort) with the rank's exit code: no rank waits forever, nothing is written.
    out = tmp / "gpu.json"
    p = run(mpirun(2) + [QC, "verify", ops, "--arms", ARMS, "--gpu-per-rank", "--json", out], check=False,
            timeout=120, env=dict(ENV, CUDA_VISIBLE_DEVICES="3"))
    check(p.returncode == 2 and "local rank 1 of 2" in p.stderr and not out.exists(),
          f"--gpu-per-rank with one visible GPU for 2 ranks: exit 2 naming local rank 1, no output ({p.returncode})")

    # 4. A rank killed mid-run (SIGKILL) ends the job with no merged output; --resume finishes it
    # with the same result as a run that was never interrupted.
    big = tmp / "big.safetensors"
    run([QC, "synth", "--shapes", "qwen3-1.7b", "--layers", "28", "--m", "96", "--seed", "3", "--out", big])
    run([QC, "verify", big, "--arms", ARMS, "--scales", "real", "--json", tmp / "big-single.json"], check=False)
    resume = tmp / "resume"
    killed_json = tmp / "big-killed.json"
    job = subprocess.Popen(mpirun(2) + [str(QC), "verify", str(big), "--arms", ARMS, "--scales", "real", "--json",
                                        str(killed_json), "--resume", str(resume)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    killed = False
    deadline = time.time() + 300
    while time.time() < deadline and job.poll() is None:
        if resume.exists() and len(list(resume.glob("layer-*.json"))) >= 2:
            pid = rank_pid(job.pid, 1)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed = True
                break
        time.sleep(0.01)
    job.communicate(timeout=300)
    done_before = len(list(resume.glob("layer-*.json")))
    check(killed, "rank 1 was killed mid-run (before the job finished)")
    check(job.returncode != 0, f"the job with a killed rank fails (exit {job.returncode})")
    check(not killed_json.exists(), "no merged output after the kill")
    check(0 < done_before < 28, f"{done_before} of 28 layers were completed before the kill")
    p = run(mpirun(2) + [QC, "verify", big, "--arms", ARMS, "--scales", "real", "--json", killed_json,
                         "--resume", resume], check=False)
    check(f"{done_before} resumed from" in p.stdout, f"the rerun skips the {done_before} completed layers")
    same = without_timings(killed_json) == without_timings(tmp / "big-single.json")
    check(same, "killed then resumed: JSON byte-identical to an uninterrupted single-process run except timings")
    # A stored result whose digest does not match is computed again, with a message.
    first = sorted(resume.glob("layer-*.json"))[0]
    stored = json.loads(first.read_text())
    stored["result"]["runs"][0]["cmp"]["bitwise_diff"] += 1
    first.write_text(json.dumps(stored))
    p = run([QC, "verify", big, "--arms", ARMS, "--scales", "real", "--json", tmp / "big-again.json",
             "--resume", resume], check=False)
    check("computed again" in p.stderr and "27 resumed from" in p.stdout,
          "a tampered stored result fails its digest check and is computed again")
    check(without_timings(tmp / "big-again.json") == without_timings(tmp / "big-single.json"),
          "and the result is still the uninterrupted one")

    # 5. generate and replay over many prompts: prompts shared over the ranks, outputs merged in
    # prompt order, identical to one process (records, token sequences, printed text).
    model = tmp / "model"
    run([QC, "synth-model", "--config", "tiny", "--seed", "5", "--out", model, "--sequences", "7", "--length", "12"])
    for mode in ("w8a8", "fp32"):
        gen = ["generate", "--model", model, "--prompts", model / "tokens.jsonl", "--max-new", "8", "--mode", mode]
        one = run([QC] + gen + ["--out", tmp / "g1.jsonl", "--tokens-out", tmp / "t1.jsonl"])
        rep = ["replay", "--model", model, "--tokens", tmp / "t1.jsonl", "--mode", mode]
        run([QC] + rep + ["--out", tmp / "r1.jsonl"])
        for r in (2, 3):
            many = run(mpirun(r) + [QC] + gen + ["--out", tmp / f"g{r}.jsonl", "--tokens-out", tmp / f"t{r}.jsonl"])
            same = all((tmp / f"{x}{r}.jsonl").read_bytes() == (tmp / f"{x}1.jsonl").read_bytes() for x in "gt")
            check(same and many.stdout == one.stdout,
                  f"generate {mode} on {r} ranks: records, sequences and text identical to one process (7 prompts)")
            run(mpirun(r) + [QC] + rep + ["--out", tmp / f"r{r}.jsonl"])
            check((tmp / f"r{r}.jsonl").read_bytes() == (tmp / "r1.jsonl").read_bytes(),
                  f"replay {mode} on {r} ranks: records identical to one process")

    # 6. capture --shard-size: the captured operands as a sharded set predict, on 2 ranks, to the
    # same layers as the single captured file.
    cap = tmp / "cap"
    cap.mkdir()
    capture = ["capture", "--model", model, "--prompts", model / "tokens.jsonl"]
    run([QC] + capture + ["--shard-size", "64K", "--out", cap / "cap.index.json"])
    run([QC] + capture + ["--out", cap / "cap.safetensors"])
    run(mpirun(2) + [QC, "predict", cap / "cap.index.json", "--out", cap / "p-sharded.json", "--quiet"])
    run([QC, "predict", cap / "cap.safetensors", "--out", cap / "p-file.json", "--quiet"])
    a, b = (json.loads((cap / f).read_text()) for f in ("p-sharded.json", "p-file.json"))
    check(len(list(cap.glob("cap-*.safetensors"))) > 1 and a["layers"] == b["layers"],
          "capture --shard-size: the sharded capture predicts (2 ranks) to the single file's layers")

    # 7. conform with its predict, verify and model-run phases shared over 3 ranks: the same results
    # (the run's timestamp, verify's timings and the manifests' creation times aside) and the same
    # files as one process writing to the same directory.
    def conform(prefix):
        run(prefix + [QC, "conform", "--synthetic-config", "tiny", "--max-new", "12", "--out", "cf"], cwd=tmp)
        moved = tmp / f"cf-{len(prefix)}"
        (tmp / "cf").rename(moved)
        doc = json.loads((moved / "results.json").read_text())
        doc.pop("created")
        doc["verify"].pop("seconds")
        doc["verify"].pop("wall_seconds")
        doc["manifests"].pop("files")
        return moved, doc
    one_dir, one = conform([])
    many_dir, many = conform(mpirun(3))
    check(one == many, "conform on 3 ranks: results.json equal to one process (timestamps, timings aside)")
    files = ["predictions.json", "operands.safetensors"] + [f"{v}.{t}.jsonl" for v in ("generate", "replay")
                                                           for t in ("A", "B")] + ["generate.pow2.A.jsonl"]
    check(all((one_dir / f).read_bytes() == (many_dir / f).read_bytes() for f in files),
          "conform on 3 ranks: predictions, operands, generations and replays byte-identical")

    # 8. C8's tensor-parallel shards on the ranks (invariance --tp under mpirun): shard t on rank t mod R,
    # the partials reduced on rank 0 in the model's fixed order. Every degree's counts, values and
    # verdicts equal the one-process simulation's, for R = 2, 3 (R = 3 does not divide the degrees: ranks
    # run unequal numbers of shards) and a row- and a column-parallel layer.
    tp_ops = tmp / "tp.safetensors"
    run([QC, "synth", "--shapes", "16x64x512", "--seed", "5", "--out", tp_ops])
    for style, reduction in (("row", "ring"), ("row", "tree+fp32"), ("column", "ring")):
        base = [QC, "invariance", "--arm", "cpu:vllm-cutlass", tp_ops, "--tp", "1,2,4,8", "--tp-style", style,
                "--reduction", reduction]
        run(base + ["--json", tmp / "tp-1.json"])
        one = json.loads((tmp / "tp-1.json").read_text())
        for r in (2, 3):
            p = run(mpirun(r) + base + ["--json", tmp / f"tp-{r}.json"])
            many = json.loads((tmp / f"tp-{r}.json").read_text())
            placements = {d["placement"] for layer in many["layers"] for d in layer["degrees"] if d["applicable"]}
            for doc in (one, many):
                for layer in doc["layers"]:
                    for d in layer["degrees"]:
                        d.pop("placement", None)
            check(one["layers"] == many["layers"] and one["verdict"] == many["verdict"],
                  f"invariance --tp {style} {reduction} on {r} ranks: every degree as in one process "
                  f"(verdict {many['verdict']})")
            check(placements == {f"{r} MPI ranks (shard t on rank t mod {r}; fixed-order reduction on rank 0)"},
                  f"invariance --tp on {r} ranks: the shards ran on the ranks ({sorted(placements)})")
            check(p.stdout.count("verdict:") == len(one["layers"]), f"invariance --tp on {r} ranks: rank 0 alone prints")
    # A rank whose arm refuses its shard ends every rank with its error (one process's exit code, the rank
    # and shard named), nothing
    # written. The misbehaving plugin refuses its second call: rank 0's shard of degree 2.
    cc = shutil.which("cc") or shutil.which("gcc")
    src = pathlib.Path(__file__).resolve().parents[2]
    if cc is None:
        check(False, "a C compiler (cc) for the misbehaving plugin of the fault case")
    else:
        lib = tmp / "refuse.so"
        run([cc, "-shared", "-fPIC", "-O1", f"-I{src / 'include'}", f"-I{src / 'examples' / 'plugin'}",
             "-DBEHAVE_REFUSE", "-DAT_CALL=2", src / "tests" / "hostile" / "plugins" / "misbehave.c", "-o", lib])
        out = tmp / "tp-fault.json"
        alone = run([QC, "invariance", "--arm", f"plugin:{lib}", tp_ops, "--tp", "1,2", "--tp-style", "row"],
                    check=False, timeout=300)
        p = run(mpirun(2) + [QC, "invariance", "--arm", f"plugin:{lib}", tp_ops, "--tp", "1,2", "--tp-style", "row",
                             "--json", out], check=False, timeout=300)
        check(p.returncode == alone.returncode != 0 and "rank 0: " in p.stderr and "[shard 0/2]" in p.stderr
              and not out.exists(),
              f"a refused shard ends the 2-rank invariance job with one process's exit code ({p.returncode}, "
              f"alone {alone.returncode}), rank and shard named, nothing written "
              f"{p.stderr[-300:]!r}")
    # The batch sweep is not spread over ranks: refused with the reason.
    p = run(mpirun(2) + [QC, "invariance", "--arm", "cpu:vllm-cutlass", tp_ops], check=False)
    check(p.returncode == 2 and "runs --tp only" in p.stderr, f"invariance without --tp under mpirun is refused (exit {p.returncode})")

    shutil.rmtree(tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all multi-rank checks passed")


if __name__ == "__main__":
    main()
