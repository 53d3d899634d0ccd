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


FP8_PAIR = "cpu:fp8-hopper-fp8-promote4,cpu:fp8-hopper-fp8-chain"


def test_conform_on_an_fp8_pair_predicts_every_difference(tmp_path):
    """Two FP8 arms: the decoder runs in mode w8a8-fp8, C2 does not apply, every difference at layer level
    is predicted by the declared models, and the depth curve's differences are all explained; verify run
    separately on the FP8 operands conform captured gives the same verdicts."""
    r, out, results = conform(tmp_path, FP8_PAIR, "fp8")
    assert r.returncode == 0, r.stdout + r.stderr
    v = verdicts(results)
    assert v["C2"] == "not-applicable", v
    assert all(v[c] == "pass" for c in ("C0", "C1", "C3", "C4", "C5", "C6")), v
    assert results["pin"] is None and results["predictions"] is None
    assert not (out / "predictions.json").exists()
    assert results["fp8"]["models"] == ["hopper-fp8-promote4", "hopper-fp8-chain"]
    assert results["fp8"]["quantization"] == {"act_quantizer": "vllm", "element": "e4m3", "act_scale": "per-token",
                                              "weight_scale": "per-channel"}
    assert [a["formula"]["accumulation_model"] for a in results["arms"]] == ["hopper-fp8-promote4", "hopper-fp8-chain"]
    # Layer level: the arms differ (chain vs promote4) and every differing element was predicted.
    runs = results["verify"]["runs"]
    assert all(x["fp8"] and x["predicted_equals_observed"] and x["formula_mismatch"] == [0, 0] for x in runs)
    assert sum(x["bitwise_diff"] for x in runs) > 0
    # ... so the answer is `explained`, localized to the accumulation (the two models differ there).
    answer = results["interchangeability"]
    assert answer["answer"] == "explained" and "accumulation stage" in answer["reason"], answer
    assert r.stdout.splitlines()[1].startswith("interchangeability: explained"), r.stdout
    # The manifests and headers record the FP8 mode; the replays differ only in the arm.
    header = json.loads((out / "replay.A.jsonl").read_text().splitlines()[0])
    assert header["linear_mode"] == "w8a8-fp8" and header["element"] == "e4m3", header
    # The depth curve: K ascending, differences growing with K, every one explained by the models.
    points = results["sweep"]["series"][0]["points"]
    assert [p["k"] for p in points] == [256, 512, 1024, 2048, 4096, 8192]
    assert all(p["bitwise_diff"] > 0 and p["explained"] == p["bitwise_diff"] == p["explained_of"] for p in points)
    assert points[-1]["bitwise_diff"] > points[0]["bitwise_diff"]
    assert "explained by the declared models" in (out / "report.html").read_text()
    # verify separately on the captured FP8 operands: the same verdicts.
    vj = tmp_path / "verify.json"
    rv = run([tool("qconform"), "verify", out / "operands.safetensors", "--arms", FP8_PAIR, "--m-sweep",
              ",".join(str(m) for m in sorted({x["m"] for x in runs})), "--json", vj],
             check=False)
    assert rv.returncode == 0, rv.stdout + rv.stderr
    separate = json.loads(vj.read_text())
    for a, b in zip(separate["checks"], results["verify"]["checks"]):
        assert a["id"] == b["id"] and a["verdict"] == b["verdict"], (a["summary"], b["summary"])


def test_conform_fp8_mutant_names_the_accumulation_stage(tmp_path):
    r, out, results = conform(tmp_path, "cpu:fp8-hopper-fp8-chain,mutant:fp8-rne-steps", "fp8-mutant")
    assert r.returncode == 1, r.stdout
    v = verdicts(results)
    assert v["C1"] == "fail" and v["C6"] == "fail", v
    assert results["verify"]["fp8"]["stage"] == "accumulation model", results["verify"]["fp8"]
    assert "mutant:fp8-rne-steps" in results["verify"]["fp8"]["stage_detail"]


def test_conform_refuses_mixed_pairs_and_fp8_flags_on_int8_arms(tmp_path):
    cases = [
        (["--arms", "cpu:vllm-cutlass,cpu:fp8-hopper-fp8-chain"], "expected two INT8 arms or two FP8 arms"),
        (["--arms", "cpu:vllm-cutlass,cpu:vllm-triton", "--element", "e4m3"], "--element `e4m3`"),
        (["--arms", FP8_PAIR, "--synthetic-config", "tiny-qwen2"], "bias"),
        (["--arms", FP8_PAIR, "--element", "e9m9"], "--element"),
        (["--arms", FP8_PAIR, "--sweep-k", "0"], "--sweep-k"),
    ]
    for i, (args, needle) in enumerate(cases):
        out = tmp_path / f"bad{i}"
        r = run([tool("qconform"), "conform", *args, "--max-new", "2", "--out", out], check=False)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert needle in r.stderr, (args, r.stderr)
        assert not (out / "results.json").exists()
