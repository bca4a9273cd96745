"""`cellm batch` on the default model: five prompts in one batch, the report checker, batch
invariance, and weights held once whatever the number of sessions."""
import json
import subprocess

from report_checker import check_report

GERMANY = ("I am planning a long trip through Europe next summer with my family, and I keep reading about "
           "old cities, museums, rivers and trains. Before I book anything: what is the capital of Germany?")
PROMPTS = [("What is the capital of France?", "Paris"), ("What is the capital of Japan?", "Tokyo"),
           ("What is the capital of Italy?", "Rome"), ("What is the capital of France?", "Paris"),
           (GERMANY, "Berlin")]


def batch(cellm_bin, tmp_path, prompts, *args, name="report"):
    prompts_file = tmp_path / f"{name}.jsonl"
    prompts_file.write_text("".join(json.dumps({"prompt": p, "expect": e}) + "\n" for p, e in prompts))
    report_file = tmp_path / f"{name}.json"
    out = subprocess.run([str(cellm_bin), "batch", "--prompts", str(prompts_file), "--temp", "0", "-n", "32",
                          "--report", str(report_file), *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(report_file.read_text()), out


def test_five_prompts_in_one_batch(cellm_bin, smollm2, tmp_path):
    report, out = batch(cellm_bin, tmp_path, PROMPTS, "--max-sessions", "5", "--max-step-tokens", "16",
                        "--kv-initial-rows", "64")
    assert check_report(report) == []
    germany = report["generations"][4]
    # The long prompt was prefilled in slices beside the other generations' decode rows.
    assert germany["timings"]["prefill_steps_beside_decodes"] >= 3, germany["timings"]
    assert report["steps"]["mixed"] >= 3
    # Every all-decode step ran the executor's decode program, timed phase by phase.
    host = report["steps"]["decode_host_seconds"]
    assert host["steps"] == report["steps"]["decode"] > 0
    assert host["inputs"] + host["launch"] + host["wait"] <= host["executor"] * (1 + 1e-9)
    assert 0 < host["engine_gaps"] < host["steps"]
    assert report["kv"]["growth_count"] >= 1  # started small and grew on demand
    for (prompt, _), g in zip(PROMPTS, report["generations"]):
        assert g["text"] in out.stdout


def test_batch_invariance(cellm_bin, smollm2, tmp_path):
    together, _ = batch(cellm_bin, tmp_path, PROMPTS, "--max-sessions", "5", "--max-step-tokens", "16")
    for i, prompt in enumerate(PROMPTS):
        alone, _ = batch(cellm_bin, tmp_path, [prompt], "--max-step-tokens", "16", name=f"alone{i}")
        assert alone["generations"][0]["tokens"] == together["generations"][i]["tokens"], prompt[0]


def test_weights_held_once_whatever_the_sessions(cellm_bin, smollm2, tmp_path):
    resident = []
    for sessions in (4, 5):
        report, _ = batch(cellm_bin, tmp_path, PROMPTS, "--max-sessions", str(sessions), name=f"s{sessions}")
        assert check_report(report) == []
        resident.append(report["memory"]["resident_weight_bytes"])
        assert report["weights_bytes"] == report["tensor_bytes"]
    assert max(resident) <= 1.05 * report["tensor_bytes"]


def test_bad_prompt_files_are_refused(cellm_bin, smollm2, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    out = subprocess.run([str(cellm_bin), "batch", "--prompts", str(bad)], capture_output=True, text=True)
    assert out.returncode != 0 and "bad.jsonl:2" in out.stderr
    missing = subprocess.run([str(cellm_bin), "batch", "--prompts", str(tmp_path / "none")], capture_output=True,
                             text=True)
    assert missing.returncode != 0 and "none" in missing.stderr


def test_ignore_eos_runs_to_the_token_limit(cellm_bin, smollm2, tmp_path):
    """The answer to the France prompt ends with end-of-generation well before 32 tokens; with
    --ignore-eos every generation runs to -n, and a JSON line's ignore_eos wins over the flag."""
    france = PROMPTS[:1]
    stopped, _ = batch(cellm_bin, tmp_path, france, name="eos")
    assert len(stopped["generations"][0]["tokens"]) < 32
    assert stopped["generations"][0]["finish_reason"] == "stop"
    forced, _ = batch(cellm_bin, tmp_path, france, "--ignore-eos", name="forced")
    assert len(forced["generations"][0]["tokens"]) == 32
    assert forced["generations"][0]["finish_reason"] == "length"
    # The same greedy start, then past the end-of-generation token.
    n = len(stopped["generations"][0]["tokens"])
    assert forced["generations"][0]["tokens"][:n] == stopped["generations"][0]["tokens"]
    lines = tmp_path / "lines.jsonl"
    lines.write_text(json.dumps({"prompt": france[0][0], "ignore_eos": True}) + "\n" +
                     json.dumps({"prompt": france[0][0], "ignore_eos": False}) + "\n")
    report_file = tmp_path / "lines.json"
    out = subprocess.run([str(cellm_bin), "batch", "--prompts", str(lines), "--temp", "0", "-n", "32", "--ignore-eos",
                          "--report", str(report_file)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lengths = [len(g["tokens"]) for g in json.loads(report_file.read_text())["generations"]]
    assert lengths == [32, n]
