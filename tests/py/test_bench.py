"""`cellm bench`: the table, the JSON (structure and sanity, never times) and the PNG plot."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tiny_model(cellm_bin, tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "tiny-llama.gguf"
    subprocess.run([str(cellm_bin), "mkmodel", "--preset", "tiny-llama", "-o", str(path)], check=True,
                   capture_output=True, timeout=120)
    return path


def bench(cellm_bin, *args, check=True):
    out = subprocess.run([str(cellm_bin), "bench", "--backend", "cpu", *args], capture_output=True, text=True,
                         timeout=600)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def check_results(report, prompt, generated, batches, cellm_bin=None):
    assert report["schema"] == "cellm.bench/1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", report["date"])
    assert report["backend"].startswith("cpu")
    assert report["bench"]["prompt_tokens"] == prompt and report["bench"]["generated_tokens"] == generated
    assert report["bench"]["batch_sizes"] == batches and report["bench"]["warmup"] is True
    assert report["load_ms"] > 0
    assert report["options"]["max_sessions"] >= max(batches)
    kv = report["kv"]
    assert kv["bytes_per_cell"] > 0 and kv["live_cells"] == 0
    assert kv["allocated_bytes"] == kv["rows"] * kv["bytes_per_cell"]
    assert [r["batch"] for r in report["results"]] == batches
    for r in report["results"]:
        b = r["batch"]
        assert r["prompt_tokens"] == b * prompt and r["generated_tokens"] == b * generated
        assert r["prompt_tok_s"] > 0 and r["generation_tok_s"] > 0
        assert r["ttft_ms"]["count"] == b and r["itl_ms"]["count"] == b * (generated - 1)
        for stats in (r["ttft_ms"], r["itl_ms"]):
            assert 0 < stats["p50"] <= stats["max"] and 0 < stats["mean"] <= stats["max"]
        assert r["itl_ms"]["p99"] <= r["itl_ms"]["max"]
        assert len(r["rounds"]) == 1 and 0 < r["rounds"][0]["decode_tokens"] <= b * (generated - 1)
        assert r["steps"] >= generated and r["preemptions"] == 0
        # The executor's decode steps, phase by phase (µs a step): the phases fit in the step.
        host = r["decode_host_us"]
        assert 1 <= host["steps"] <= r["steps"]
        assert min(host["inputs"], host["launch"], host["wait"]) >= 0
        assert host["inputs"] + host["launch"] + host["wait"] <= host["executor"] * (1 + 1e-9)
        assert host["engine_gap"] > 0  # each round has two decode steps in a row or more
        # A decode step yields one token per generation: generation_tok_s / b steps a second.
        expected = r["generation_tok_s"] / b * report["decode_weight_bytes"] / 1e9
        assert r["weight_stream_gb_s"] == pytest.approx(expected, rel=1e-9)
    if cellm_bin is not None:
        # What a decode step reads: every tensor of the file, of the embedding table one row a
        # token (not counted) unless the output is tied to it.
        info = json.loads(subprocess.run([str(cellm_bin), "inspect", "-m", report["model"], "--json"],
                                         check=True, capture_output=True, text=True).stdout)
        tensors = info["tensors"]["list"]
        names = {t["name"] for t in tensors}
        whole = sum(t["bytes"] for t in tensors if t["name"] != "token_embd.weight" or "output.weight" not in names)
        assert report["decode_weight_bytes"] == whole


def test_tiny_model_json_table_and_plot(cellm_bin, tiny_model, tmp_path):
    json_path, png_path = tmp_path / "x.json", tmp_path / "x.png"
    out = bench(cellm_bin, "-m", str(tiny_model), "-p", "32", "-n", "8", "--batch", "1,4", "--json", str(json_path),
                "--plot", str(png_path))
    report = json.loads(json_path.read_text())
    check_results(report, 32, 8, [1, 4], cellm_bin)
    assert report["architecture"] == "llama" and report["model"] == str(tiny_model)
    png = png_path.read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    # The table on stdout: a header and one row per batch size; logs stay on stderr.
    rows = [line for line in out.stdout.splitlines() if re.match(r"\|\s+\d+ \|", line)]
    assert [int(line.split("|")[1]) for line in rows] == [1, 4]
    assert "weights GB/s" in out.stdout and "a decode step reads" in out.stdout
    assert "| batch |" in out.stdout and "warm-up" in out.stderr and "warm-up" not in out.stdout


def test_repetitions_pool_rounds(cellm_bin, tiny_model, tmp_path):
    json_path = tmp_path / "r.json"
    bench(cellm_bin, "-m", str(tiny_model), "-p", "8", "-n", "3", "--batch", "2", "-r", "3", "--json", str(json_path))
    (r,) = json.loads(json_path.read_text())["results"]
    assert len(r["rounds"]) == 3 and r["ttft_ms"]["count"] == 6 and r["itl_ms"]["count"] == 12


def test_default_smollm2_tiny_sizes(cellm_bin, smollm2, tmp_path):
    json_path = tmp_path / "s.json"
    bench(cellm_bin, "-p", "16", "-n", "4", "--batch", "1,2", "--json", str(json_path))
    report = json.loads(json_path.read_text())
    check_results(report, 16, 4, [1, 2], cellm_bin)
    assert report["model"] == str(smollm2) or report["model"].endswith(smollm2.name)


def test_plot_script_refuses_other_json(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"generations": []}))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "plot-bench"), str(other), "-o",
                          str(tmp_path / "o.png")], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "not a cellm bench report" in out.stderr
    assert not (tmp_path / "o.png").exists()


def test_refusals(cellm_bin, tiny_model):
    too_many = bench(cellm_bin, "-m", str(tiny_model), "-p", "4", "-n", "2", "--batch", "4", "--max-sessions", "2",
                     check=False)
    assert too_many.returncode != 0 and "max_sessions (2)" in too_many.stderr
    zero = bench(cellm_bin, "-m", str(tiny_model), "--batch", "1,0", check=False)
    assert zero.returncode != 0 and "batch" in zero.stderr
    too_long = bench(cellm_bin, "-m", str(tiny_model), "-p", "2048", "-n", "8", "--batch", "1", check=False)
    assert too_long.returncode != 0 and "context length 2048" in too_long.stderr


def test_sampled_rounds_count_every_token_and_are_recorded(cellm_bin, tiny_model, tmp_path):
    # With --temp the rows are drawn by the samplers (logits leave the backend), still exactly
    # -n tokens each; the settings are in the JSON. A top-p of 0 is refused by name.
    json_path = tmp_path / "t.json"
    bench(cellm_bin, "-m", str(tiny_model), "-p", "8", "-n", "5", "--batch", "3", "--temp", "0.9", "--top-p", "0.9",
          "--json", str(json_path))
    report = json.loads(json_path.read_text())
    assert report["bench"]["temperature"] == pytest.approx(0.9) and report["bench"]["top_p"] == pytest.approx(0.9)
    (r,) = report["results"]
    assert r["ttft_ms"]["count"] == 3 and r["itl_ms"]["count"] == 12
    zero = bench(cellm_bin, "-m", str(tiny_model), "-p", "4", "-n", "2", "--batch", "1", "--top-p", "0", "--temp", "1",
                 check=False)
    assert zero.returncode != 0 and "top_p" in zero.stderr
