"""Model checkpoints against peers no one here wrote: the `safetensors` library reads what
`qconform synth-model` writes; numpy (and ml_dtypes for bf16) recompute compressed-tensors'
per-channel quantization (scale = absmax/127.5, codes = round-half-even(w/scale), saturated) from
the HF checkpoint of the same seed, and the nearest power of two (log2) of every scale that
`qconform pow2` wrote; every other tensor must be byte-identical.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_model_peer.py
"""
import json

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import run, tool

BF16 = ml_dtypes.bfloat16


def synth(tmp_path, name, fmt, dtype, seed=13):
    out = tmp_path / f"{name}-{fmt}-{dtype}"
    run([tool("qconform"), "synth-model", "--config", name, "--seed", seed, "--out", out, "--format", fmt,
         "--dtype", dtype])
    return out


def as_f32(a):
    return a.astype(np.float32)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-qwen2"])
def test_compressed_tensors_quantization_matches_numpy(tmp_path, name, dtype):
    hf = load_file(str(synth(tmp_path, name, "hf", dtype) / "model.safetensors"))
    ct_dir = synth(tmp_path, name, "compressed-tensors", dtype)
    ct = load_file(str(ct_dir / "model.safetensors"))
    cfg = json.loads((ct_dir / "config.json").read_text())
    q = cfg["quantization_config"]
    assert q["quant_method"] == "compressed-tensors" and q["format"] == "int-quantized"
    linear = [k[: -len(".weight_scale")] for k in ct if k.endswith(".weight_scale")]
    assert len(linear) == 14
    for key in linear:
        w = as_f32(hf[key + ".weight"])
        absmax = np.max(np.abs(w), axis=1, keepdims=True)
        if dtype == "f32":
            scale = (absmax / np.float32(127.5)).astype(np.float32)
            quot = (w / scale).astype(np.float32)
        else:
            # torch: the division runs in fp32 and the result is stored in the model dtype (bf16).
            scale = as_f32((absmax / np.float32(127.5)).astype(np.float32).astype(BF16))
            quot = as_f32((w / scale).astype(np.float32).astype(BF16))
        codes = np.clip(np.rint(quot), -128, 127).astype(np.int8)  # np.rint: half to even
        assert ct[key + ".weight"].dtype == np.int8
        assert ct[key + ".weight_scale"].shape == (w.shape[0], 1)
        np.testing.assert_array_equal(as_f32(ct[key + ".weight_scale"]), scale, err_msg=key)
        bad = np.argwhere(ct[key + ".weight"] != codes)
        assert bad.size == 0, f"{key}: {len(bad)} codes differ, first at {bad[0]}"
    # Every non-linear tensor is the HF one, unchanged.
    for k, v in hf.items():
        if not any(k == l + ".weight" for l in linear):
            assert np.array_equal(v.view(np.uint8), ct[k].view(np.uint8)), k


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_pow2_rewrites_scales_only(tmp_path, dtype):
    src = synth(tmp_path, "tiny-qwen3", "compressed-tensors", dtype)
    before = (src / "model.safetensors").read_bytes()
    out = tmp_path / "probe"
    res = run([tool("qconform"), "pow2", src, out])
    assert "sha256:" in res.stdout
    assert (src / "model.safetensors").read_bytes() == before, "IN was modified"
    assert (src / "config.json").read_bytes() == (out / "config.json").read_bytes()
    a = load_file(str(src / "model.safetensors"))
    b = load_file(str(out / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        if k.endswith(".weight_scale"):
            s = a[k].astype(np.float64)
            want = np.exp2(np.round(np.log2(s)))  # threshold 2^(e+1/2) is irrational: no ties
            np.testing.assert_array_equal(b[k].astype(np.float64), want, err_msg=k)
        else:
            assert np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)), k
    # Refusals: OUT exists (also OUT == IN), and a llama2.c checkpoint has no scales.
    assert run([tool("qconform"), "pow2", src, src], check=False).returncode == 2
    ll = synth(tmp_path, "tiny", "llama2c", "f32")
    r = run([tool("qconform"), "pow2", ll, tmp_path / "never"], check=False)
    assert r.returncode == 2 and "no weight scales" in r.stderr
    assert not (tmp_path / "never").exists()


def shard(src, out, n_shards, mutate=None):
    """Re-writes src/model.safetensors as `n_shards` files plus model.safetensors.index.json, the
    layout transformers' save_pretrained writes, with the safetensors library."""
    from safetensors.numpy import save_file
    tensors = load_file(str(src / "model.safetensors"))
    names = sorted(tensors)
    out.mkdir()
    (out / "config.json").write_bytes((src / "config.json").read_bytes())
    weight_map = {}
    for i in range(n_shards):
        part = names[i::n_shards]
        fname = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        save_file({k: tensors[k] for k in part}, str(out / fname))
        weight_map.update({k: fname for k in part})
    index = {"metadata": {"total_size": int(sum(t.nbytes for t in tensors.values()))}, "weight_map": weight_map}
    if mutate:
        mutate(index)
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    return out


def generate_records(model, tmp_path, tag, extra=()):
    out = tmp_path / f"{tag}.jsonl"
    r = run([tool("qconform"), "generate", "--model", model, "--prompts", model.parent / "prompts.jsonl",
             "--max-new", 6, "--out", out, *extra])
    return [json.loads(line) for line in out.read_text().splitlines()], r


@pytest.mark.parametrize("fmt,extra", [("hf", ()), ("compressed-tensors", ("--mode", "w8a8"))])
def test_sharded_checkpoint_runs_like_the_single_file(tmp_path, fmt, extra):
    src = synth(tmp_path, "tiny-qwen3", fmt, "bf16")
    (tmp_path / "prompts.jsonl").write_text((src / "tokens.jsonl").read_text().splitlines()[0] + "\n")
    single, _ = generate_records(tmp_path / src.name, tmp_path, "single", extra)
    sharded_dir = shard(src, tmp_path / "sharded", 3)
    sharded, _ = generate_records(sharded_dir, tmp_path, "sharded", extra)
    strip = lambda recs: [{k: v for k, v in r.items() if k not in ("model", "model_sha256")} for r in recs]
    assert strip(sharded) == strip(single) and len(single) == 1 + 6  # header + 6 positions
    assert sharded[0]["model_sha256"] != single[0]["model_sha256"]  # other files: another identity
    # The run's manifest names and digests the index and every shard.
    inputs = json.loads((tmp_path / "sharded.jsonl.manifest.json").read_text())["inputs"]
    assert sorted(k for k in inputs if k.startswith("model.")) == [
        "model.config", "model.weights.index"] + [f"model.weights.model-{i:05d}-of-00003.safetensors" for i in (1, 2, 3)]


def test_sharded_checkpoint_errors_name_index_shard_and_tensor(tmp_path):
    src = synth(tmp_path, "tiny-qwen3", "hf", "f32")
    cases = {
        "missing-shard": (lambda ix: ix["weight_map"].update({"model.norm.weight": "model-absent.safetensors"}),
                          "model-absent.safetensors"),
        "wrong-shard": (lambda ix: ix["weight_map"].update(
            {"model.norm.weight": next(v for k, v in ix["weight_map"].items() if v != ix["weight_map"]["model.norm.weight"])}),
            "model.norm.weight"),
        "unlisted": (lambda ix: ix["weight_map"].pop("model.norm.weight"), "model.norm.weight"),
        "traversal": (lambda ix: ix["weight_map"].update({"model.norm.weight": "../model.safetensors"}),
                      "../model.safetensors"),
        "not-a-map": (lambda ix: ix.update({"weight_map": []}), "weight_map"),
    }
    for name, (mutate, needle) in cases.items():
        d = shard(src, tmp_path / name, 2, mutate)
        r = run([tool("qconform"), "generate", "--model", d, "--max-new", 2], check=False)
        assert r.returncode == 2, (name, r.stderr)
        assert "model.safetensors.index.json" in r.stderr and needle in r.stderr, (name, r.stderr)


def test_llama2c_directory_runs_and_its_manifest_names_model_bin(tmp_path):
    d = synth(tmp_path, "tiny", "llama2c", "f32")
    out = tmp_path / "g.jsonl"
    run([tool("qconform"), "generate", "--model", d, "--max-new", 3, "--out", out])
    inputs = json.loads((tmp_path / "g.jsonl.manifest.json").read_text())["inputs"]
    assert inputs["model"]["path"].endswith("model.bin") and "model.config" not in inputs
