"""A soak of one `cellm serve` process on loopback: many requests from a few client threads at
once, with random prompt lengths and max_tokens, clients that leave mid-request, and malformed
requests. Stdlib only (raw sockets), so a client decides exactly what bytes it sends and when it
goes away. Used by scripts/soak (the full run) and tests/py/test_soak.py (a short one in CI).

Every request is classified by what came back:
  ok           2xx with a complete body (a stream ending in `data: [DONE]`)
  cancelled    the client left on purpose before the response was complete
  4xx          by status code; `unexpected` counts a malformed request that was not refused
               and a well-formed one that was
  5xx          by status code
  transport    no complete response where one was due (refused, reset, cut short, timed out)
"""
import json
import random
import socket
import threading
import time
from collections import Counter

WORDS = ("river city blue train music old garden paper light stone window quiet north bread cloud "
         "story apple field mountain winter").split()


def rss_bytes(pid):
    """Resident set size of a process, from /proc/PID/status (VmRSS, kB)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Response:
    def __init__(self):
        self.status = 0
        self.headers = {}
        self.body = b""
        self.complete = False


def _read_response(sock, deadline):
    """Reads one HTTP/1.1 response (Content-Length, chunked, or to the close) from `sock`."""
    r = Response()
    buf = b""

    def more():
        nonlocal buf
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed by the server")
        buf += data

    while b"\r\n\r\n" not in buf:
        more()
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    r.status = int(lines[0].split()[1])
    for line in lines[1:]:
        name, _, value = line.partition(":")
        r.headers[name.strip().lower()] = value.strip()
    if "content-length" in r.headers:
        n = int(r.headers["content-length"])
        while len(buf) < n:
            more()
        r.body = buf[:n]
    elif r.headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            while b"\r\n" not in buf:
                more()
            size_line, buf = buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(buf) < size + 2:
                more()
            body += buf[:size]
            buf = buf[size + 2:]
            if size == 0:
                break
        r.body = body
    else:
        try:
            while True:
                more()
        except ConnectionError:
            pass
        r.body = buf
    r.complete = True
    return r


def _request_bytes(path, body, content_length=None, extra_headers=""):
    payload = body if isinstance(body, bytes) else body.encode()
    length = len(payload) if content_length is None else content_length
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Connection: close\r\nContent-Length: {length}\r\n{extra_headers}\r\n")
    return head.encode() + payload


def _words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


class Soak:
    """One soak run against host:port. `context` is the server's -c (for over-long prompts)."""

    def __init__(self, host, port, *, context, seed=1, max_prompt_words=48, max_tokens=(1, 4),
                 timeout=120.0):
        self.host, self.port = host, port
        self.context = context
        self.seed = seed
        self.max_prompt_words = max_prompt_words
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.counts = Counter()        # ok, cancelled, transport, unexpected
        self.statuses = Counter()      # every status code received
        self.kinds = Counter()         # requests by kind
        self.problems = []             # first few descriptions of 5xx, transport, unexpected
        self._lock = threading.Lock()

    # --- one request of each kind ------------------------------------------------------------
    def _body(self, rng, stream):
        words = _words(rng, rng.randint(1, self.max_prompt_words))
        lo, hi = self.max_tokens
        common = {"max_tokens": rng.randint(lo, hi), "temperature": rng.choice([0, 0.7]), "seed": rng.randint(0, 99),
                  "stream": stream}
        if rng.random() < 0.5:
            return "/v1/chat/completions", {"messages": [{"role": "user", "content": words}], **common}
        return "/v1/completions", {"prompt": words, **common}

    def _malformed(self, rng):
        """(kind, path, raw bytes, expect): expect is '4xx' or 'ok' (tolerated by design)."""
        ok_chat = {"messages": [{"role": "user", "content": _words(rng, 3)}], "max_tokens": 1}
        choice = rng.randrange(10)
        path = "/v1/chat/completions"
        if choice == 0:
            return "bad_json", path, _request_bytes(path, '{"messages": [{"role": "user", "content": "hi"'), "4xx"
        if choice == 1:
            return "wrong_type", path, _request_bytes(path, json.dumps({"messages": "hello"})), "4xx"
        if choice == 2:
            body = {**ok_chat, rng.choice(["max_tokens", "temperature", "stream", "top_p"]): "ten"}
            return "wrong_type", path, _request_bytes(path, json.dumps(body)), "4xx"
        if choice == 3:
            body = {"prompt": "word " * (self.context + 16), "max_tokens": 1}
            return "over_long_prompt", "/v1/completions", _request_bytes("/v1/completions", json.dumps(body)), "4xx"
        if choice == 4:  # OpenAI clients send fields a server may not know: ignored, answered
            body = {**ok_chat, "frobnicate": {"x": 1}, "logit_bias": None}
            return "unknown_field", path, _request_bytes(path, json.dumps(body)), "ok"
        if choice == 5:  # one model per server: the name is echoed, not checked
            body = {**ok_chat, "model": "no-such-model"}
            return "unknown_model", path, _request_bytes(path, json.dumps(body)), "ok"
        if choice == 6:  # declares less than it sends: the body read is cut, not valid JSON
            raw = json.dumps(ok_chat)
            return "short_content_length", path, _request_bytes(path, raw, content_length=len(raw) // 2), "4xx"
        if choice == 7:  # more than the server takes at all
            return "huge_content_length", path, _request_bytes(path, b"{}", content_length=1 << 40), "4xx"
        if choice == 8:
            return "non_numeric_content_length", path, _request_bytes(path, b"{}", content_length="ten"), "4xx"
        return "unknown_route", "/v1/engines", _request_bytes("/v1/engines", json.dumps(ok_chat)), "4xx"

    def _exchange(self, raw, leave=None):
        """Sends `raw`; reads the response unless `leave` says when to go: ('now',) right after
        sending, ('events', k) after k SSE events, ('sleep', s) after s seconds."""
        deadline = time.monotonic() + self.timeout
        with socket.create_connection((self.host, self.port), timeout=self.timeout) as sock:
            sock.sendall(raw)
            if leave is None:
                return _read_response(sock, deadline)
            if leave[0] == "sleep":
                time.sleep(leave[1])
            elif leave[0] == "events":
                seen, buf = 0, b""
                while seen < leave[1]:
                    sock.settimeout(max(0.01, deadline - time.monotonic()))
                    data = sock.recv(4096)
                    if not data:
                        break
                    buf += data
                    seen = buf.count(b"data: ")
                    if b"data: [DONE]" in buf:
                        break  # ended before the client meant to leave: still a departure
            # Closing with unread data makes the kernel send a reset: a client that goes away.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            return None

    def _record(self, key, status=None, problem=None):
        with self._lock:
            self.counts[key] += 1
            if status is not None:
                self.statuses[status] += 1
            if problem and len(self.problems) < 20:
                self.problems.append(problem)

    def one(self, rng):
        roll = rng.random()
        if roll < 0.15:
            kind, path, raw, expect = self._malformed(rng)
            leave = None
        else:
            stream = rng.random() < 0.5
            path, body = self._body(rng, stream)
            raw = _request_bytes(path, json.dumps(body))
            expect, leave = "ok", None
            kind = "stream" if stream else "plain"
            if roll < 0.35:  # the client leaves
                kind = "cancel_" + kind
                if rng.random() < 0.3:
                    leave = ("now",)
                elif stream:
                    leave = ("events", rng.randint(1, 3))
                else:
                    leave = ("sleep", rng.uniform(0, 0.05))
        with self._lock:
            self.kinds[kind] += 1
        try:
            r = self._exchange(raw, leave)
        except (OSError, ValueError, IndexError) as e:
            self._record("transport", problem=f"{kind}: {type(e).__name__}: {e}")
            return
        if r is None:
            self._record("cancelled")
            return
        status = r.status
        if status >= 500:
            self._record("5xx", status, f"{kind}: {status} {r.body[:200]!r}")
        elif status >= 400:
            self._record("4xx", status, None if expect == "4xx" else f"{kind}: unexpected {status} {r.body[:200]!r}")
            if expect != "4xx":
                self._record("unexpected")
        elif expect == "4xx":
            self._record("unexpected", status, f"{kind}: accepted with {status}")
        elif self._complete(r, path):
            self._record("ok", status)
        else:
            self._record("transport", status, f"{kind}: incomplete body {r.body[-200:]!r}")

    @staticmethod
    def _complete(r, path):
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            return r.body.rstrip().endswith(b"data: [DONE]") and b'"error"' not in r.body
        try:
            return "choices" in json.loads(r.body)
        except ValueError:
            return False

    # --- a run ---------------------------------------------------------------------------------
    def run(self, requests, concurrency, max_seconds):
        """Issues `requests` requests from `concurrency` threads, stopping early after
        `max_seconds`; returns how many were issued."""
        issued = [0]
        lock = threading.Lock()
        stop_at = time.monotonic() + max_seconds

        def worker(index):
            rng = random.Random(self.seed * 1000 + index)
            while True:
                with lock:
                    if issued[0] >= requests or time.monotonic() > stop_at:
                        return
                    issued[0] += 1
                self.one(rng)

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return issued[0]

    def figures(self):
        return {
            "ok": self.counts["ok"],
            "cancelled": self.counts["cancelled"],
            "4xx": {str(k): v for k, v in sorted(self.statuses.items()) if 400 <= k < 500},
            "5xx": {str(k): v for k, v in sorted(self.statuses.items()) if k >= 500},
            "transport_errors": self.counts["transport"],
            "unexpected": self.counts["unexpected"],
            "by_kind": dict(sorted(self.kinds.items())),
            "problems": self.problems,
        }


class RssSampler:
    """Samples a process's RSS every `interval` seconds on a thread of its own (for the peak)."""

    def __init__(self, pid, interval=0.05):
        self.pid, self.interval = pid, interval
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self):
        while not self._stop.wait(self.interval):
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except (OSError, RuntimeError):
                return

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak


def soak(server, *, requests, concurrency, warmup, seed=1, max_seconds=600, context, **options):
    """The whole procedure on a running ServerProcess: warm-up, baseline, the run, then the
    figures (requests by class, RSS before/after/peak, live cells after, duration)."""
    pid = server.proc.pid
    Soak(server.host, server.port, context=context, seed=seed + 7919, **options).run(warmup, concurrency, max_seconds)
    idle = wait_idle(server)
    rss_before = rss_bytes(pid)
    sampler = RssSampler(pid)
    run = Soak(server.host, server.port, context=context, seed=seed, **options)
    started = time.monotonic()
    issued = run.run(requests, concurrency, max_seconds)
    duration = time.monotonic() - started
    after = wait_idle(server)
    peak = sampler.stop()
    rss_after = rss_bytes(pid)
    status, _, text = server.request("POST", "/v1/completions", {"prompt": "The capital of France is",
                                                                 "max_tokens": 2, "temperature": 0})
    figures = {
        "requests": issued,
        "concurrency": concurrency,
        "duration_s": round(duration, 2),
        "requests_per_s": round(issued / duration, 1) if duration > 0 else None,
        **run.figures(),
        "rss_mib": {"before": _mib(rss_before), "after": _mib(rss_after), "peak": _mib(peak)},
        "kv_allocated_mib": {"before": _mib(idle["cellm_kv_allocated_bytes"]),
                             "after": _mib(after["cellm_kv_allocated_bytes"])},
        "live_cells_after": after["cellm_kv_live_cells"],
        "sessions_after": {"running": after["cellm_sessions_running"], "waiting": after["cellm_sessions_waiting"]},
        "client_disconnects": after["cellm_client_disconnects_total"] - idle["cellm_client_disconnects_total"],
        "answers_afterwards": status == 200 and "choices" in json.loads(text),
    }
    # RSS growth not explained by the KV pool growing (the pool keeps its rows by design).
    figures["rss_growth_beyond_kv_mib"] = round(
        figures["rss_mib"]["after"] - figures["rss_mib"]["before"]
        - (figures["kv_allocated_mib"]["after"] - figures["kv_allocated_mib"]["before"]), 1)
    return figures


def _mib(n):
    return round(n / (1 << 20), 1)


def wait_idle(server, timeout=60):
    """The server's metrics once nothing runs or waits (the last departures processed)."""
    deadline = time.monotonic() + timeout
    while True:
        m = server.metrics()
        if m["cellm_sessions_running"] == 0 and m["cellm_sessions_waiting"] == 0:
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"the server is not idle after {timeout} s: {m}")
        time.sleep(0.05)


def check(figures, *, rss_bound_mib):
    """The soak's invariants; returns the list of violations (empty when all hold)."""
    bad = []
    if figures["5xx"]:
        bad.append(f"5xx answers: {figures['5xx']}")
    if figures["transport_errors"]:
        bad.append(f"{figures['transport_errors']} transport errors")
    if figures["unexpected"]:
        bad.append(f"{figures['unexpected']} answers of the wrong class")
    if figures["live_cells_after"] != 0:
        bad.append(f"{figures['live_cells_after']} live cells after the run")
    if any(figures["sessions_after"].values()):
        bad.append(f"sessions left: {figures['sessions_after']}")
    if not figures["answers_afterwards"]:
        bad.append("the server does not answer afterwards")
    if figures["rss_growth_beyond_kv_mib"] > rss_bound_mib:
        bad.append(f"RSS grew {figures['rss_growth_beyond_kv_mib']} MiB beyond the KV pool (bound {rss_bound_mib})")
    if figures["problems"]:
        bad.append("problems: " + "; ".join(figures["problems"][:5]))
    return bad
