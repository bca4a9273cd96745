"""Checks a `cellm batch --report` JSON report against the rules of issue #6 (a test helper).

check_report(report, expected) returns a list of problems (empty when the report passes):
  - every generation finished normally (stop or length) and contains its expected answer;
  - no cell left behind: kv.live_cells == 0 once every generation ended;
  - kv.rows >= kv.peak_live_cells;
  - kv.rows <= max(initial rows, 2 x rows needed), rows needed = the peak live cells plus at
    most one partly filled page per sequence of a step;
  - kv.allocated_bytes == kv.rows x kv.bytes_per_cell;
  - kv.rows well below max_sessions x context length (nothing reserved up front);
  - weights loaded once: resident weight bytes <= 1.05 x the GGUF tensor bytes.
"""


def check_report(report, expected=None):
    problems = []
    gens = report["generations"]
    for i, g in enumerate(gens):
        if g["finish_reason"] not in ("stop", "length"):
            problems.append(f"generation {i} finished with {g['finish_reason']}: {g.get('error', '')}")
        want = (expected[i] if expected else None) or g.get("expect")
        if want and want not in g["text"]:
            problems.append(f"generation {i} lacks {want!r}: {g['text']!r}")
    kv = report["kv"]
    rows, peak, page = kv["rows"], kv["peak_live_cells"], kv["page_cells"]
    if kv["live_cells"] != 0:
        problems.append(f"{kv['live_cells']} live cells left after every generation ended")
    if rows < peak:
        problems.append(f"kv rows {rows} < peak live cells {peak}")
    sequences = report["steps"]["max_sequences_in_step"]
    needed = peak + sequences * page
    if rows > max(kv["initial_rows"], 2 * needed):
        problems.append(f"kv rows {rows} > max(initial {kv['initial_rows']}, 2 x needed {needed})")
    if kv["allocated_bytes"] != rows * kv["bytes_per_cell"]:
        problems.append(f"allocated bytes {kv['allocated_bytes']} != rows x bytes per cell")
    opts = report["options"]
    if rows * 4 > opts["max_sessions"] * opts["context_length"]:
        problems.append(f"kv rows {rows} are not well below {opts['max_sessions']} sessions x {opts['context_length']}")
    mem = report["memory"]
    if mem["resident_weight_bytes"] > 1.05 * report["tensor_bytes"]:
        problems.append(f"resident weight bytes {mem['resident_weight_bytes']} > 1.05 x {report['tensor_bytes']}")
    if report["weights_bytes"] > 1.05 * report["tensor_bytes"]:
        problems.append("weights placed more than once")
    return problems
