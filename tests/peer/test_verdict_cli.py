"""The interchangeability answer and the lines that may only say what was checked, end to end:
`qconform verify` and `qconform conform` from the CLI (printed text and JSON) and `qconform.verify`
from Python, on the four pairs whose answers are fixed (an arm against itself -> identical, two
declared production formulas -> explained, an undeclared differing arm -> unexplained, a mutant ->
different); a C1 failure that names its case and cause (a plugin that wraps around at K = 131072);
conform finding the llama2.c tokenizer beside a model, or saying loudly that it falls back; one
spelling of the arms flag and "did you mean" for typos.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_verdict_cli.py
"""
import json
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from conftest import REPO, SHARED, run, tool
from test_python_binding import qc, vllm_triton_numpy  # noqa: F401  (the fixture and a NumPy kernel)

TINY = ["--synthetic-config", "tiny", "--max-new", "4"]


def shared_dir():
    for d in (SHARED, pathlib.Path(os.environ.get("QCONFORM_SHARED_DIR", "/nonexistent"))):
        if (d / "models" / "stories260K" / "stories260K.bin").exists():
            return d
    return None


def compile_plugin(tmp_path, source, name, *defines):
    if shutil.which("cc") is None:
        pytest.skip("SKIPPED: no C compiler (`cc`) to build the test plugin")
    out = tmp_path / name
    subprocess.run(["cc", "-std=c99", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math",
                    f"-I{REPO / 'include'}", f"-I{REPO / 'examples' / 'plugin'}", *defines, str(REPO / source), "-o",
                    str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    """A layer on which vllm-cutlass and vllm-triton differ (6 of 2^20 outputs under real scales)."""
    path = tmp_path_factory.mktemp("ops") / "ops.safetensors"
    run([tool("qconform"), "synth", "--shapes", "512x2048x256", "--seed", "2", "--out", path])
    return path


def extremes(tmp_path):
    """Codes of -128 and 127 only, written with the safetensors library: int16 pair sums saturate."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(1)
    path = tmp_path / "extremes.safetensors"
    save_file({"ext.a_q": np.where(rng.integers(0, 2, (16, 1008)) == 1, 127, -128).astype(np.int8),
               "ext.a_scale": np.full(16, 2.0 ** -14, np.float32),
               "ext.w_q": np.where(rng.integers(0, 2, (64, 1008)) == 1, 127, -128).astype(np.int8),
               "ext.w_scale": np.full(64, 2.0 ** -9, np.float32)}, str(path))
    return path


def verify(ops, arms, tmp_path, *extra):
    j = tmp_path / "v.json"
    r = run([tool("qconform"), "verify", ops, "--arms", arms, "--reference", "cpu", "--json", j, *extra], check=False)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return r, json.loads(j.read_text())


def answer_line(stdout):
    """The answer is the first thing after the header line."""
    lines = stdout.splitlines()
    assert lines[1].startswith("interchangeability: "), stdout[:2000]
    return lines[1]


# ---- verify, CLI ----------------------------------------------------------------------------------

def test_verify_answers_the_four_pairs(ops, tmp_path):
    r, j = verify(ops, "cpu:vllm-cutlass,cpu:vllm-cutlass", tmp_path)
    assert r.returncode == 0 and answer_line(r.stdout).startswith("interchangeability: identical"), r.stdout
    assert j["interchangeability"]["answer"] == "identical"

    r, j = verify(ops, "cpu:vllm-cutlass,cpu:vllm-triton", tmp_path)
    assert r.returncode == 0 and answer_line(r.stdout).startswith("interchangeability: explained"), r.stdout
    assert j["interchangeability"]["answer"] == "explained"
    assert j["total_real"]["bitwise_diff"] > 0
    assert all(isinstance(x["predicted_diff"], int) and x["predicted_equals_observed"] is True for x in j["runs"])

    r, j = verify(extremes(tmp_path), "cpu:vllm-cutlass,mutant:int16-saturate", tmp_path)
    assert r.returncode == 1 and answer_line(r.stdout).startswith("interchangeability: different"), r.stdout
    assert "names the accumulation stage" in j["interchangeability"]["reason"], j["interchangeability"]


def test_verify_of_an_undeclared_plugin_is_unexplained_and_claims_no_prediction(ops, tmp_path):
    so = compile_plugin(tmp_path, "tests/unit/plugins/undeclared_arm.c", "libundeclared.so")
    r, j = verify(ops, f"cpu:vllm-cutlass,plugin:{so}", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    line = answer_line(r.stdout)
    assert line.startswith("interchangeability: unexplained"), r.stdout
    assert f"next: run `qconform identify --arm plugin:{so}`" in r.stdout, r.stdout
    # No line claims a prediction nothing made.
    assert "predicted set == observed" not in r.stdout, r.stdout
    assert "no formula declared for B: differences not predicted (declare one, or run identify)" in r.stdout
    assert "computed here, not pinned" in r.stdout and "pinned predictions match" not in r.stdout
    a = j["interchangeability"]
    assert a["answer"] == "unexplained" and "qconform identify --arm" in a["advice"], a
    for x in j["runs"]:
        assert x["predicted_diff"] is None and x["predicted_equals_observed"] is None, x
        assert x["formula_mismatch"][1] is None and x["formula_mismatch"][0] == 0, x
    # Declaring what identify names makes the same pair explained.
    r, j = verify(ops, f"cpu:vllm-cutlass,plugin:{so}", tmp_path, "--declare", "B=vllm-triton")
    assert answer_line(r.stdout).startswith("interchangeability: explained"), r.stdout


# ---- verify, Python -------------------------------------------------------------------------------

def test_python_verify_answers_in_python_words(qc, ops, tmp_path):  # noqa: F811
    layers = str(ops)
    same = qc.verify("cpu:vllm-cutlass", "cpu:vllm-cutlass", layers, reference="cpu")
    assert same["interchangeability"]["answer"] == "identical", same["interchangeability"]
    declared = qc.verify("cpu:vllm-cutlass", qc.arm(vllm_triton_numpy, epilogue="vllm-triton"), layers,
                         reference="cpu")
    assert declared["interchangeability"]["answer"] == "explained", declared["interchangeability"]
    undeclared = qc.verify("cpu:vllm-cutlass", qc.arm(vllm_triton_numpy), layers, reference="cpu")
    a = undeclared["interchangeability"]
    assert a["answer"] == "unexplained", a
    assert "qconform.identify(arm_b)" in a["advice"] and "epilogue=" in a["advice"], a
    assert "--" not in a["advice"], "a CLI flag in a Python message: " + a["advice"]
    assert all(x["predicted_diff"] is None for x in undeclared["runs"])
    mutant = qc.verify("cpu:vllm-cutlass", "mutant:int16-saturate", str(extremes(tmp_path)),
                       reference="cpu")
    assert mutant["interchangeability"]["answer"] == "different", mutant["interchangeability"]
    # Python's own argument names in verify's messages.
    with pytest.raises(qc.InputError, match="scales: unknown scale regime"):
        qc.verify("cpu:vllm-cutlass", "cpu:vllm-triton", layers, scales="real,nope")


# ---- conform --------------------------------------------------------------------------------------

def conform(tmp_path, arms, name, *extra):
    out = tmp_path / name
    r = run([tool("qconform"), "conform", "--arms", arms, *TINY, "--out", out, *extra], check=False)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return r, json.loads((out / "results.json").read_text()), out


def test_conform_answers_first_in_console_json_and_report(tmp_path):
    r, res, out = conform(tmp_path, "cpu:vllm-cutlass,cpu:vllm-triton", "explained")
    assert r.returncode == 0, r.stdout
    a = res["interchangeability"]
    assert a["answer"] in ("explained", "identical"), a  # tiny layers may show no difference at all
    if res["verify"]["total_real"]["bitwise_diff"] > 0:
        assert a["answer"] == "explained", a
    assert "token effect measured" in a["reason"] or a["answer"] == "identical", a
    assert answer_line(r.stdout).startswith(f"interchangeability: {a['answer']}"), r.stdout
    html = (out / "report.html").read_text()
    assert f'<div class="answer {a["answer"]}" id="qc-answer">' in html
    assert html.index('id="qc-answer"') < html.index('id="verdicts"'), "the answer comes before the verdict table"
    assert '<details class="data" id="qc-manifests">' in html  # manifests collapsed under the verdict
    # C7 without --max-flip-rate: reported, not a pass.
    c7 = next(c for c in res["checks"] if c["id"] == "C7")
    assert c7["verdict"] == "reported" and c7["summary"].startswith("reported (no tolerance set"), c7
    assert "every falsifiable check passed" not in r.stdout
    r, res, _ = conform(tmp_path, "cpu:vllm-cutlass,cpu:vllm-triton", "tolerance", "--max-flip-rate", "1")
    assert next(c for c in res["checks"] if c["id"] == "C7")["verdict"] == "pass"


def test_conform_of_an_undeclared_arm_without_identify_is_unexplained(tmp_path):
    so = compile_plugin(tmp_path, "tests/unit/plugins/undeclared_arm.c", "libundeclared.so")
    r, res, _ = conform(tmp_path, f"cpu:vllm-cutlass,plugin:{so}", "undeclared", "--no-identify")
    a = res["interchangeability"]
    if res["verify"]["total_real"]["bitwise_diff"] == 0:
        pytest.skip("SKIPPED: the tiny model's layers show no difference between the two formulas")
    assert r.returncode == 0 and a["answer"] == "unexplained", a
    assert "predicted set == observed" not in r.stdout, r.stdout
    assert "next: run `qconform identify --arm" in r.stdout, r.stdout


def test_conform_of_a_mutant_is_different(tmp_path):
    r, res, _ = conform(tmp_path, "cpu:vllm-cutlass,mutant:int16-saturate", "mutant")
    assert r.returncode == 1
    a = res["interchangeability"]
    assert a["answer"] == "different" and a["evidence"]["failed"][0]["check"] == "C1", a


def test_conform_names_a_failed_c1_case_and_its_cause(tmp_path):
    so = compile_plugin(tmp_path, "tests/unit/plugins/wrap_arm.c", "libwrap.so")
    r, res, _ = conform(tmp_path, f"cpu:vllm-triton,plugin:{so}", "wrap")
    assert r.returncode == 1, r.stdout
    assert "case accumulation/all-min/K=131072 (arm B" in r.stdout, r.stdout
    assert "inputs a_q [1,131072]" in r.stdout and "missing refusal" in r.stdout, r.stdout
    c1 = next(c for c in res["checks"] if c["id"] == "C1")
    assert "missing refusal" in c1["points_to"], c1["points_to"]
    assert c1["evidence"]["failed_cases"][0]["id"] == "accumulation/all-min/K=131072"
    assert res["interchangeability"]["answer"] == "different"


def test_conform_finds_the_tokenizer_beside_a_llama2c_model_or_says_it_falls_back(tmp_path):
    shared = shared_dir()
    if shared is None:
        pytest.skip(f"SKIPPED: stories260K not found in {SHARED}/models/stories260K (or $QCONFORM_SHARED_DIR)")
    model = shared / "models" / "stories260K" / "stories260K.bin"
    out = tmp_path / "found"
    r = run([tool("qconform"), "conform", "--model", model, "--max-new", "4", "--out", out], check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "results.json").read_text())
    assert res["prompts"]["tokenizer"].endswith("tok512.bin"), res["prompts"]
    assert res["prompts"]["warning"] is None and res["prompts"]["count"] == 120, res["prompts"]
    assert "found beside the model" in r.stdout and "WARNING" not in r.stdout, r.stdout

    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(model, alone / "stories260K.bin")
    out = tmp_path / "fallback"
    r = run([tool("qconform"), "conform", "--model", alone / "stories260K.bin", "--max-new", "4", "--out", out],
            check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING: FALLING BACK TO RANDOM-TOKEN PROMPTS" in r.stdout, r.stdout
    res = json.loads((out / "results.json").read_text())
    assert res["prompts"]["tokenizer"] is None and "RANDOM-TOKEN" in res["prompts"]["warning"]
    assert 'id="qc-prompts-warning"' in (out / "report.html").read_text()


# ---- one spelling of the arms flag; "did you mean" ------------------------------------------------

def test_the_arms_flag_and_did_you_mean(ops, tmp_path):
    q = tool("qconform")
    r = run([q, "verify", ops, "--arm", "cpu:vllm-cutlass,cpu:vllm-triton"], check=False)
    assert r.returncode == 2 and "did you mean `--arms`?" in r.stderr, r.stderr
    r = run([q, "verfy", ops], check=False)
    assert r.returncode == 2 and "did you mean `verify`?" in r.stderr, r.stderr
    r = run([q, "conform", "--arms", "cpu:vllm-cutlass,cpu:vllm-triton", "--max-nwe", "4"], check=False)
    assert r.returncode == 2 and "did you mean `--max-new`?" in r.stderr, r.stderr
    r = run([q, "verify", ops, "--arms", "cpu:vllm-cutlas,cpu:vllm-triton"], check=False)
    assert r.returncode == 2 and "did you mean `cpu:vllm-cutlass`" in r.stderr, r.stderr
    # A typo of an old spelling is answered with the one spelling.
    r = run([q, "sweep", "--pairs", "cpu:vllm-cutlass,cpu:vllm-triton"], check=False)
    assert r.returncode == 2 and "did you mean `--arms`?" in r.stderr, r.stderr
    # `--arms` on sweep, and the old `--pair` as its alias: the same results.
    outs = []
    for flag in ("--arms", "--pair"):
        j = tmp_path / f"sweep{flag}.json"
        run([q, "sweep", flag, "cpu:vllm-cutlass,cpu:vllm-triton", "--k", "64", "--m", "4", "--n", "8", "--seeds",
             "1", "--json", j])
        rows = json.loads(j.read_text())["rows"]
        for row in rows:  # the wall time is the one field two identical sweeps differ in
            for cell in row["per_seed"]:
                cell.pop("seconds")
        outs.append(rows)
    assert outs[0] == outs[1]
