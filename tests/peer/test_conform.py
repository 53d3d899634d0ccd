"""`qconform conform` end to end: its verdicts match the layer-level and transfer results run
separately on its own artefacts, a mutant arm fails the check for the stage it breaks, and the
identity contract refuses a tampered artefact."""
import json

from conftest import run, tool


def conform(tmp_path, arms, name):
    out = tmp_path / name
    r = run([tool("qconform"), "conform", "--arms", arms, "--synthetic-config", "tiny", "--max-new", "8",
             "--out", out], check=False)
    assert r.returncode in (0, 1), r.stderr
    results = json.loads((out / "results.json").read_text())
    return r, out, results


def verdicts(results):
    return {c["id"]: c["verdict"] for c in results["checks"]}


def test_conform_matches_separate_runs(tmp_path):
    r, out, results = conform(tmp_path, "cpu:vllm-cutlass,cpu:vllm-triton", "ok")
    assert r.returncode == 0, r.stdout
    v = verdicts(results)
    assert [c["id"] for c in results["checks"]] == ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7"]
    assert all(v[c] == "pass" for c in ("C0", "C1", "C2", "C3", "C4", "C5", "C6")), v
    assert (out / "report.html").stat().st_size > 10000

    # The layer-level checks again, from the CLI, on the operands and pinned predictions conform wrote.
    pin = results["pin"]
    vj = tmp_path / "verify.json"
    rv = run([tool("qconform"), "verify", out / "operands.safetensors", "--arms", "cpu:vllm-cutlass,cpu:vllm-triton",
              "--predictions", out / "predictions.json", "--pin", pin, "--m-sweep", "1,4,16,64," +
              str(results["predictions"]["layers"][0]["m"]), "--json", vj], check=False)
    assert rv.returncode == 0, rv.stdout + rv.stderr
    separate = json.loads(vj.read_text())
    assert [c["id"] for c in separate["checks"]] == [c["id"] for c in results["verify"]["checks"]]
    for a, b in zip(separate["checks"], results["verify"]["checks"]):
        assert a["id"] == b["id"] and a["verdict"] == b["verdict"], (a["summary"], b["summary"])
    assert separate["total_real"]["bitwise_diff"] == results["verify"]["total_real"]["bitwise_diff"]

    # The transfer statistics again, from the CLI, on the replays conform wrote.
    tj = tmp_path / "transfer.json"
    rt = run([tool("qconform"), "transfer", out / "replay.A.jsonl", out / "replay.B.jsonl", "--replay",
              "--seed", str(results["transfer"]["options"]["seed"]), "--min-bin-support", "20", "--json", tj])
    separate_t = json.loads(tj.read_text())
    assert separate_t["replay"]["flips"] == results["transfer"]["replay"]["flips"]
    assert separate_t["replay"]["positions"] == results["transfer"]["replay"]["positions"]

    # C0 separately, and refused once an input changed on disk.
    rj = run([tool("qconform"), "join", out / "replay.A.manifest.json", out / "replay.B.manifest.json",
              "--treatment", "arm"], check=False)
    assert rj.returncode == 0, rj.stdout
    prompts = out / "prompts.jsonl"
    prompts.write_text(prompts.read_text() + "\n")
    rj = run([tool("qconform"), "join", out / "replay.A.manifest.json", out / "replay.B.manifest.json",
              "--treatment", "arm"], check=False)
    assert rj.returncode == 1 and "prompts" in rj.stdout, rj.stdout


def test_conform_with_a_mutant_fails_the_stage_check(tmp_path):
    r, _, results = conform(tmp_path, "cpu:vllm-cutlass,mutant:bf16-truncate", "mutant")
    assert r.returncode == 1
    v = verdicts(results)
    assert v["C5"] == "fail", v  # the epilogue stage
    assert v["C4"] == "pass", v  # the accumulator has its alibi
    c5 = next(c for c in results["checks"] if c["id"] == "C5")
    assert "epilogue" in c5["points_to"]
    assert "points to: epilogue" in r.stdout


def test_conform_with_an_accumulation_mutant_fails_c4(tmp_path):
    r, _, results = conform(tmp_path, "cpu:vllm-cutlass,mutant:acc-bitflip", "bitflip")
    assert r.returncode == 1
    v = verdicts(results)
    assert v["C4"] == "fail", v
    c4 = next(c for c in results["checks"] if c["id"] == "C4")
    assert "accumulation" in c4["points_to"]
