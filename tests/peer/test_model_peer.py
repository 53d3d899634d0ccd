"""Model checkpoints against peers no one here wrote: the `safetensors` library reads what
`qconform synth-model` writes; numpy (and ml_dtypes for bf16) recompute compressed-tensors'
per-channel quantization (scale = absmax/127.5, codes = round-half-even(w/scale), saturated) from
the HF checkpoint of the same seed, and the nearest power of two (log2) of every scale that
`qconform pow2` wrote; every other tensor must be byte-identical. The compressed-tensors FP8
("float-quantized") checkpoints of `synth-model --format compressed-tensors-fp8` are read by the
library (F8_E4M3 tensors, viewed as ml_dtypes.float8_e4m3fn), their codes and scales recomputed
with numpy/ml_dtypes, their dequantization run by qconform against numpy's, and a checkpoint the
library writes from numpy's quantization runs in mode w8a8-fp8 exactly like qconform's own.

Run: QCONFORM_BUILD=$PWD/build python3 -m pytest -q tests/peer/test_model_peer.py
"""
import json

import ml_dtypes
import numpy as np
import pytest
import safetensors
from safetensors.numpy import load_file, save_file

from conftest import run, tool

BF16 = ml_dtypes.bfloat16


def synth(tmp_path, name, fmt, dtype, seed=13):
    out = tmp_path / f"{name}-{fmt}-{dtype}"
    run([tool("qconform"), "synth-model", "--config", name, "--seed", seed, "--out", out, "--format", fmt,
         "--dtype", dtype])
    return out


def as_f32(a):
    return a.astype(np.float32)


def strip_identity(records):
    """Records without the model's path and digest: runs of the same weights in other files compare equal."""
    return [{k: v for k, v in r.items() if k not in ("model", "model_sha256")} for r in records]


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
    assert strip_identity(sharded) == strip_identity(single) and len(single) == 1 + 6  # header + 6 positions
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


# ------------------------------------------------------------------ compressed-tensors FP8

E4M3 = ml_dtypes.float8_e4m3fn
NP_DTYPES = {"F32": np.float32, "BF16": BF16, "F8_E4M3": E4M3, "I8": np.int8}


def raw_tensors(path):
    """The library's own reading of a file (safetensors.deserialize: no numpy dtype mapping, which
    knows no float8), each tensor viewed with its ml_dtypes type."""
    with open(path, "rb") as f:
        return {name: np.frombuffer(bytes(v["data"]), dtype=NP_DTYPES[v["dtype"]]).reshape(v["shape"])
                for name, v in safetensors.deserialize(f.read())}


def fp8_synth(tmp_path, name, dtype, scaling, seed=13):
    out = tmp_path / f"{name}-fp8-{dtype}-{scaling}"
    run([tool("qconform"), "synth-model", "--config", name, "--seed", seed, "--out", out, "--format",
         "compressed-tensors-fp8", "--dtype", dtype, "--weight-scale", scaling])
    return out


def numpy_fp8(w, dtype, scaling):
    """compressed-tensors' float-quantized weights: scale = absmax/448 (per row, or over the matrix),
    in the model dtype; q = clamp(w/scale, +-448) cast to float8_e4m3fn (round to nearest even)."""
    absmax = np.max(np.abs(w), axis=1, keepdims=True) if scaling == "per-channel" else np.max(np.abs(w)).reshape(1)
    scale = (absmax / np.float32(448)).astype(np.float32)
    if dtype == "bf16":
        scale = as_f32(scale.astype(BF16))
        quot = as_f32((w / scale).astype(np.float32).astype(BF16))  # torch rounds the quotient to bf16
    else:
        quot = (w / scale).astype(np.float32)
    return np.clip(quot, -448, 448).astype(E4M3), scale


@pytest.mark.parametrize("scaling", ["per-channel", "per-tensor"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_fp8_checkpoint_matches_numpy_and_ml_dtypes(tmp_path, dtype, scaling):
    hf = load_file(str(synth(tmp_path, "tiny-qwen3", "hf", dtype) / "model.safetensors"))
    ct_dir = fp8_synth(tmp_path, "tiny-qwen3", dtype, scaling)
    ct = raw_tensors(ct_dir / "model.safetensors")
    q = json.loads((ct_dir / "config.json").read_text())["quantization_config"]
    group = q["config_groups"]["group_0"]
    assert q["quant_method"] == "compressed-tensors" and q["format"] == "float-quantized"
    assert group["weights"]["type"] == "float" and group["weights"]["num_bits"] == 8
    assert group["weights"]["strategy"] == ("channel" if scaling == "per-channel" else "tensor")
    assert group["input_activations"]["strategy"] == "token" and group["input_activations"]["dynamic"] is True
    linear = [k[: -len(".weight_scale")] for k in ct if k.endswith(".weight_scale")]
    assert len(linear) == 14
    ours = {}
    for key in linear:
        w = as_f32(hf[key + ".weight"])
        codes, scale = numpy_fp8(w, dtype, scaling)
        assert ct[key + ".weight"].dtype == E4M3 and ct[key + ".weight"].shape == w.shape, key
        assert ct[key + ".weight_scale"].shape == ((w.shape[0], 1) if scaling == "per-channel" else (1,)), key
        np.testing.assert_array_equal(as_f32(ct[key + ".weight_scale"]), scale, err_msg=key)
        bad = np.argwhere(ct[key + ".weight"].view(np.uint8) != codes.view(np.uint8))
        assert bad.size == 0, f"{key}: {len(bad)} codes differ, first at {bad[0]}"
        # Dequantized, every weight is within half an e4m3 step of the original (bf16: plus the
        # rounding of the quotient to bf16, at most 1/16 of a step).
        deq = as_f32(codes) * scale
        q_abs = np.abs(as_f32(codes))
        step = np.exp2(np.floor(np.log2(np.maximum(q_abs, 2.0 ** -6))) - 3)  # e4m3: 3 fraction bits, subnormal step 2^-9
        err = np.abs(w - deq) / np.broadcast_to(scale, w.shape)
        assert np.all(err <= step * (0.5 if dtype == "f32" else 0.5625) * (1 + 1e-5)), key
        ours[key + ".weight"] = codes
        ours[key + ".weight_scale"] = ct[key + ".weight_scale"]
    for k, v in hf.items():
        if not any(k == l + ".weight" for l in linear):
            assert np.array_equal(v.view(np.uint8), ct[k].view(np.uint8)), k
            ours[k] = v
    # A checkpoint the library writes from numpy's quantization runs like qconform's own, in mode
    # w8a8-fp8 (its codes used bit for bit) and in mode fp32 (its dequantization).
    py_dir = tmp_path / "python-fp8"
    py_dir.mkdir()
    (py_dir / "config.json").write_bytes((ct_dir / "config.json").read_bytes())
    save_file(ours, str(py_dir / "model.safetensors"))
    for mode in ("w8a8-fp8", "fp32"):
        a = replay_records(ct_dir, ct_dir / "tokens.jsonl", tmp_path, f"ours-{mode}", ("--mode", mode))
        b = replay_records(py_dir, ct_dir / "tokens.jsonl", tmp_path, f"python-{mode}", ("--mode", mode))
        assert strip_identity(a) == strip_identity(b) and len(a) == 1 + 4 * 15, mode  # header + 4 sequences of 16 tokens


def replay_records(model, tokens, tmp_path, tag, extra=()):
    out = tmp_path / f"{tag}.jsonl"
    run([tool("qconform"), "replay", "--model", model, "--tokens", tokens, "--out", out, *extra])
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_fp8_dequantization_is_numpy_s(tmp_path, dtype):
    """qconform's mode fp32 on an FP8 checkpoint runs fp32(value(code) * scale): the same logits as an
    F32 Hugging Face checkpoint whose weights numpy dequantized (every other tensor widened exactly)."""
    ct_dir = fp8_synth(tmp_path, "tiny-qwen3", dtype, "per-channel")
    ct = raw_tensors(ct_dir / "model.safetensors")
    deq = {}
    for k, v in ct.items():
        if k.endswith(".weight_scale"):
            continue
        if v.dtype == E4M3:
            deq[k] = (as_f32(v) * as_f32(ct[k + "_scale"])).astype(np.float32)
        else:
            deq[k] = as_f32(v)
    d = tmp_path / "dequantized"
    d.mkdir()
    cfg = json.loads((ct_dir / "config.json").read_text())
    del cfg["quantization_config"]
    cfg["torch_dtype"] = "float32"
    (d / "config.json").write_text(json.dumps(cfg))
    save_file(deq, str(d / "model.safetensors"))
    tokens = ct_dir / "tokens.jsonl"
    assert strip_identity(replay_records(ct_dir, tokens, tmp_path, "fp8")) == strip_identity(replay_records(d, tokens, tmp_path, "deq"))


@pytest.mark.parametrize("scaling", ["per-channel", "per-tensor"])
def test_pow2_rewrites_fp8_scales_only(tmp_path, scaling):
    src = fp8_synth(tmp_path, "tiny-qwen3", "bf16", scaling)
    out = tmp_path / "probe"
    run([tool("qconform"), "pow2", src, out])
    a, b = raw_tensors(src / "model.safetensors"), raw_tensors(out / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        if k.endswith(".weight_scale"):
            want = np.exp2(np.round(np.log2(a[k].astype(np.float64))))
            np.testing.assert_array_equal(b[k].astype(np.float64), want, err_msg=k)
        else:
            assert np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)), k
