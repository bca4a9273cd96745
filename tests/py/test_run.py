"""`cellm run` answers real questions with the default models (greedy)."""
import json
import subprocess

import pytest

from conftest import ROOT


def run(cellm_bin, *args, check=True):
    return subprocess.run([str(cellm_bin), "run", "--temp", "0", *args], capture_output=True, text=True,
                          check=check, timeout=300)


@pytest.mark.parametrize("country,capital", [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"),
                                             ("Germany", "Berlin")])
def test_smollm2_knows_capitals(cellm_bin, smollm2, country, capital):
    out = run(cellm_bin, "-m", str(smollm2), "-p", f"What is the capital of {country}?", "-n", "24")
    assert capital in out.stdout, out.stdout
    # Text goes to stdout, speed to stderr.
    assert "tok/s" in out.stderr and "tok/s" not in out.stdout


def test_gemma3_knows_paris(cellm_bin, gemma3):
    # Gemma 3 270M here is the base model (no chat template in the file): ask it plainly.
    out = run(cellm_bin, "-m", str(gemma3), "--raw", "-p", "What is the capital of France?", "-n", "16")
    assert "Paris" in out.stdout, out.stdout


def test_default_model_and_stop_at_end_of_turn(cellm_bin, smollm2):
    out = run(cellm_bin, "-p", "What is the capital of France?", "-n", "200")
    assert "Paris" in out.stdout
    assert "| stop |" in out.stderr  # ended at <|im_end|>, not at -n


def test_same_seed_same_text(cellm_bin, smollm2):
    args = ["-p", "Tell me a story about a cat.", "-n", "24", "--temp", "0.9", "--seed", "1234"]
    first = subprocess.run([str(cellm_bin), "run", *args], capture_output=True, text=True, check=True, timeout=300)
    second = subprocess.run([str(cellm_bin), "run", *args], capture_output=True, text=True, check=True, timeout=300)
    assert first.stdout == second.stdout
    other = subprocess.run([str(cellm_bin), "run", *args[:-1], "99"], capture_output=True, text=True, check=True,
                           timeout=300)
    assert other.stdout != first.stdout


def test_bad_flags_are_refused(cellm_bin, smollm2):
    out = run(cellm_bin, "-p", "x", "--top-p", "2", check=False)
    assert out.returncode != 0 and "top-p" in out.stderr
    out = run(cellm_bin, "-m", "/nonexistent.gguf", "-p", "x", check=False)
    assert out.returncode != 0 and "/nonexistent.gguf" in out.stderr


def test_context_past_the_trained_length_is_warned_about(cellm_bin, smollm2):
    # SmolLM2 was trained on 8192 positions: a longer context runs, with a warning naming both.
    out = run(cellm_bin, "-m", str(smollm2), "-p", "x", "-n", "1", "-c", "20000")
    assert "20000" in out.stderr and "8192" in out.stderr and "trained" in out.stderr
    out = run(cellm_bin, "-m", str(smollm2), "-p", "x", "-n", "1", "-c", "8192")
    assert "trained" not in out.stderr


@pytest.mark.parametrize("build", ["avx512", "avx2"])
def test_ggml_numerics_write_llama_cpps_text(cellm_bin, gemma3, build):
    # llama.cpp's own greedy run of this prompt, by its AVX-512 or AVX2 build (the two differ,
    # and cellm's numerics differ from both).
    reference = json.loads((ROOT / "tests" / "data" / "reference" / f"gemma3-{build}.json").read_text())
    prompt = reference["prompts"][2]
    out = run(cellm_bin, "-m", str(gemma3), "--raw", "--numerics", f"ggml-{build}", "-p", prompt["text"], "-n", "64")
    assert out.stdout.rstrip("\n") == prompt["output"]


def test_ggml_numerics_run_on_the_cpu_only(cellm_bin, smollm2):
    out = run(cellm_bin, "-m", str(smollm2), "-p", "x", "--numerics", "ggml", "--backend", "cuda", check=False)
    assert out.returncode != 0 and "CPU only" in out.stderr, out.stderr
    out = run(cellm_bin, "-m", str(smollm2), "-p", "x", "--numerics", "ggml-neon", check=False)
    assert out.returncode != 0 and "--numerics" in out.stderr, out.stderr
