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


def tensor_types(cellm_bin, path):
    return {t["name"]: t["type"] for t in inspect(cellm_bin, path)["tensors"]["list"]}


def q4_k_m_expected(types, layers, q6_k, q4_k, embd):
    """The Q4_K_M mix in the stored types: attn_v and ffn_down of `layers` in `q6_k`, the other
    matrices in `q4_k` (each after its fallback), token_embd (tied output) in `embd`."""
    expected = {}
    for name in types:
        matrix = name.rsplit(".", 2)[-2]
        if name.endswith("norm.weight"):
            expected[name] = "f32"
        elif name == "token_embd.weight":
            expected[name] = embd
        elif matrix in ("attn_v", "ffn_down") and int(name.split(".")[1]) in layers:
            expected[name] = q6_k
        else:
            expected[name] = q4_k
    return expected


# llama.cpp's Q4_K_M: q6_K for attn_v and ffn_down in the first and last eighth of the layers and
# every third between (of 8 layers: 0, 3, 6, 7) and for the logits' matrix (token_embd here, tied).
def test_q4_k_m_mix(cellm_bin, tmp_path):
    path = tmp_path / "mix.gguf"
    result = mkmodel(cellm_bin, path, "--preset", "tiny-llama", "--type", "Q4_K_M", "--layers", "8", "--embd",
                     "256", "--ff", "512", "--head-dim", "64", "--heads", "4", "--kv-heads", "2")
    assert ", q4_k_m, 8 layers" in result.stderr and "fallback" not in result.stderr, result.stderr
    types = tensor_types(cellm_bin, path)
    assert types == q4_k_m_expected(types, {0, 3, 6, 7}, "q6_K", "q4_K", embd="q6_K")
    run_four_tokens(cellm_bin, path)


# 64 wide, tiny-llama's rows hold no whole k-quant block: q4_K falls back to q5_0 and q6_K to
# q8_0, as in llama.cpp, and the mix shows in the fallback types (of 2 layers, layer 1 is promoted).
def test_q4_k_m_mix_falls_back_on_a_tiny_model(cellm_bin, tmp_path):
    path = tmp_path / "tiny-mix.gguf"
    result = mkmodel(cellm_bin, path, "--preset", "tiny-llama", "--type", "q4_k_m")
    assert "q4_k_m" in result.stderr and "15 whose rows are not whole k-quant blocks" in result.stderr, result.stderr
    types = tensor_types(cellm_bin, path)
    assert types == q4_k_m_expected(types, {1}, "q8_0", "q5_0", embd="q8_0")
    run_four_tokens(cellm_bin, path)


# The default Gemma 3 model is a llama.cpp Q4_K_M file: mkmodel's gemma3-270m under the mix has
# its tensors, each in the type it has there.
def test_q4_k_m_mix_matches_a_real_file(cellm_bin, tmp_path, gemma3):
    path = tmp_path / "gemma3-270m-mix.gguf"
    mkmodel(cellm_bin, path, "--preset", "gemma3-270m", "--type", "q4_k_m", "--fast")
    assert tensor_types(cellm_bin, path) == tensor_types(cellm_bin, gemma3)


def test_help_names_the_mix(cellm_bin):
    out = subprocess.run([str(cellm_bin), "mkmodel", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "q4_k_m is llama.cpp's Q4_K_M mix" in out.stdout, out.stdout


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
    assert "q4_k_m" in bad_type.stderr
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
