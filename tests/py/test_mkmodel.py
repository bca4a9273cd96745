"""`cellm mkmodel` writes random-weight GGUF models that `cellm inspect` describes and `cellm run`
runs, in every weight type asked for; it refuses what it cannot write."""
import hashlib
import json
import subprocess

import pytest


def mkmodel(cellm_bin, out, *args, check=True):
    result = subprocess.run([str(cellm_bin), "mkmodel", "-o", str(out), *args], capture_output=True, text=True,
                            timeout=300)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def inspect(cellm_bin, path):
    out = subprocess.run([str(cellm_bin), "inspect", "-m", str(path), "--json"], capture_output=True, text=True,
                         check=True, timeout=60)
    return json.loads(out.stdout)


def run_four_tokens(cellm_bin, path):
    out = subprocess.run([str(cellm_bin), "run", "-m", str(path), "--backend", "cpu", "--raw", "-p", "hi", "-n", "4",
                          "--ignore-eos", "--temp", "0"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "generation 4 tokens" in out.stderr, out.stderr


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


# Tiny presets are 64 wide: a 256-element k-quant does not fit their rows, so their matrices
# fall back as llama.cpp's do (q4_K -> q5_0).
@pytest.mark.parametrize("preset,arch", [("tiny-llama", "llama"), ("tiny-gemma3", "gemma3")])
@pytest.mark.parametrize("type_name,stored", [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q4_k", "q5_0"), ("bf16", "bf16")])
def test_tiny_presets_inspect_and_run(cellm_bin, tmp_path, preset, arch, type_name, stored):
    path = tmp_path / f"{preset}-{type_name}.gguf"
    result = mkmodel(cellm_bin, path, "--arch", arch, "--preset", preset, "--type", type_name)
    assert "100%" in result.stderr and "MB/s" in result.stderr, result.stderr
    info = inspect(cellm_bin, path)
    assert info["architecture"] == arch and info["supported"] is True
    types = info["tensors"]["by_type"]
    assert set(types) == {stored, "f32"}, types  # matrices in the type, norms in f32
    if type_name == "q4_k":
        assert "fallback" in result.stderr
    run_four_tokens(cellm_bin, path)


def test_k_quant_where_rows_hold_whole_blocks(cellm_bin, tmp_path):
    path = tmp_path / "wide.gguf"
    mkmodel(cellm_bin, path, "--preset", "tiny-llama", "--type", "q4_k", "--embd", "256", "--ff", "512",
            "--head-dim", "64", "--heads", "4", "--kv-heads", "2")
    info = inspect(cellm_bin, path)
    assert set(info["tensors"]["by_type"]) == {"q4_K", "f32"}
    assert info["hyperparameters"]["embedding_size"] == 256
    run_four_tokens(cellm_bin, path)


def test_fast_path_is_valid_and_seeded(cellm_bin, tmp_path):
    slow, fast, fast_again, other = (tmp_path / f"{n}.gguf" for n in ("slow", "fast", "fast2", "other"))
    shape = ["--preset", "tiny-gemma3", "--type", "q4_k", "--embd", "256", "--ff", "256", "--heads", "4",
             "--head-dim", "64"]
    mkmodel(cellm_bin, slow, *shape)
    mkmodel(cellm_bin, fast, *shape, "--fast")
    mkmodel(cellm_bin, fast_again, *shape, "--fast")
    mkmodel(cellm_bin, other, *shape, "--fast", "--seed", "2")
    assert sha256(fast) == sha256(fast_again)
    assert len({sha256(slow), sha256(fast), sha256(other)}) == 3
    assert slow.stat().st_size == fast.stat().st_size
    assert inspect(cellm_bin, fast)["tensors"]["by_type"].keys() == {"q4_K", "f32"}
    run_four_tokens(cellm_bin, fast)


def test_layers_override(cellm_bin, tmp_path):
    path = tmp_path / "deep.gguf"
    mkmodel(cellm_bin, path, "--preset", "tiny-llama", "--layers", "5")
    assert inspect(cellm_bin, path)["hyperparameters"]["layers"] == 5


def test_refusals(cellm_bin, tmp_path):
    path = tmp_path / "m.gguf"
    bad_type = mkmodel(cellm_bin, path, "--preset", "tiny-llama", "--type", "q8_k", check=False)
    assert bad_type.returncode != 0 and "q8_k" in bad_type.stderr and "q4_K" in bad_type.stderr
    unknown_type = mkmodel(cellm_bin, path, "--preset", "tiny-llama", "--type", "q7_x", check=False)
    assert unknown_type.returncode != 0 and "q7_x" in unknown_type.stderr
    mismatch = mkmodel(cellm_bin, path, "--preset", "tiny-gemma3", "--arch", "llama", check=False)
    assert mismatch.returncode != 0 and "gemma3" in mismatch.stderr and "tiny-llama" in mismatch.stderr
    unknown_preset = mkmodel(cellm_bin, path, "--preset", "llama9-1t", check=False)
    assert unknown_preset.returncode != 0 and "llama9-1t" in unknown_preset.stderr
    heads = mkmodel(cellm_bin, path, "--preset", "tiny-llama", "--heads", "3", check=False)
    assert heads.returncode != 0 and "n_kv_heads" in heads.stderr
    assert not path.exists()

    path.write_bytes(b"precious")
    exists = mkmodel(cellm_bin, path, "--preset", "tiny-llama", check=False)
    assert exists.returncode != 0 and "--force" in exists.stderr
    assert path.read_bytes() == b"precious"
    mkmodel(cellm_bin, path, "--preset", "tiny-llama", "--force")
    assert inspect(cellm_bin, path)["architecture"] == "llama"
