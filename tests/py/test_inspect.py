"""`cellm inspect` on the default models, text and JSON."""
import json
import subprocess


def inspect(cellm_bin, *args):
    out = subprocess.run([str(cellm_bin), "inspect", *args], check=True, capture_output=True, text=True)
    return out.stdout


def test_smollm2_json(cellm_bin, smollm2):
    j = json.loads(inspect(cellm_bin, "-m", str(smollm2), "--json"))
    assert j["architecture"] == "llama"
    h = j["hyperparameters"]
    assert (h["layers"], h["heads"], h["kv_heads"], h["head_dim"], h["embedding_size"]) == (30, 9, 3, 64, 576)
    assert h["context_length"] == 8192
    assert h["rope_bases"] == [{"base": 100000.0, "layers": list(range(30))}]
    assert h["sliding_window"] == 0 and h["windowed_layers"] == []
    assert j["tokenizer"]["model"] == "gpt2" and j["tokenizer"]["tokens"] == 49152
    assert j["chat_template"] is True
    assert j["tensors"]["count"] == 272
    assert j["tensors"]["by_type"]["q4_1"]["count"] == 210
    listed = j["tensors"]["list"]
    assert len(listed) == 272 and sum(t["bytes"] for t in listed) == j["tensors"]["bytes"]
    embd = next(t for t in listed if t["name"] == "token_embd.weight")
    assert (embd["type"], embd["dims"]) == ("q8_0", [576, 49152])


def test_gemma3_json(cellm_bin, gemma3):
    j = json.loads(inspect(cellm_bin, "-m", str(gemma3), "--json"))
    assert j["architecture"] == "gemma3"
    h = j["hyperparameters"]
    assert (h["layers"], h["heads"], h["kv_heads"], h["head_dim"], h["embedding_size"]) == (18, 4, 1, 256, 640)
    assert h["sliding_window"] == 512
    assert h["global_layers"] == [5, 11, 17]
    assert h["windowed_layers"] == [i for i in range(18) if i not in (5, 11, 17)]
    bases = {b["base"]: b["layers"] for b in h["rope_bases"]}
    assert bases == {10000.0: h["windowed_layers"], 1000000.0: [5, 11, 17]}
    assert j["tokenizer"]["model"] == "llama" and j["tokenizer"]["tokens"] == 262144
    assert j["chat_template"] is False


def test_default_model_and_text(cellm_bin, smollm2):
    text = inspect(cellm_bin)  # -m omitted: the default model
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in text
    assert "layers             30" in text
    assert "chat template      present" in text


def test_missing_and_corrupt_files_are_refused(cellm_bin, tmp_path):
    missing = subprocess.run([str(cellm_bin), "inspect", "-m", str(tmp_path / "nope.gguf")],
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "nope.gguf" in missing.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    refused = subprocess.run([str(cellm_bin), "inspect", "-m", str(bad)], capture_output=True, text=True)
    assert refused.returncode != 0
    assert "metadata count" in refused.stderr and "at byte 16" in refused.stderr
