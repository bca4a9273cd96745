"""Runs `cellm serve` as a subprocess for the black-box tests: starts it on a free port (port 0,
read back from its log), waits for /health, gives small HTTP helpers (stdlib http.client, so a
test controls the connection itself), and stops it with a signal."""
import http.client
import json
import re
import signal
import subprocess
import threading
import time

from prometheus_client.parser import text_string_to_metric_families

LISTENING = re.compile(r"listening on http://([^:\s]+):(\d+)")


class ServerProcess:
    def __init__(self, cellm_bin, *args, start_timeout=120):
        self.proc = subprocess.Popen([str(cellm_bin), "serve", "--port", "0", *map(str, args)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        self._port_found = threading.Event()
        self.host, self.port = "127.0.0.1", None
        threading.Thread(target=self._read_log, daemon=True).start()
        deadline = time.monotonic() + start_timeout
        while not self._port_found.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("cellm serve did not start:\n" + "".join(self.log))
        while self.request("GET", "/health")[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("cellm serve never became healthy:\n" + "".join(self.log))
            time.sleep(0.05)

    def _read_log(self):
        for line in self.proc.stderr:
            self.log.append(line)
            match = LISTENING.search(line)
            if match and self.port is None:
                self.host, self.port = match.group(1), int(match.group(2))
                self._port_found.set()

    @property
    def base_url(self):
        return f"http://{self.host}:{self.port}"

    def connection(self, timeout=120):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers, body text); `body` may be bytes, str or a JSON-able object."""
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        conn = self.connection(timeout)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read().decode()
        finally:
            conn.close()

    def metrics(self):
        """{sample name with sorted labels: value}, parsed by prometheus_client."""
        status, _, text = self.request("GET", "/metrics")
        assert status == 200
        values = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return values

    def wait_for_metric(self, name, predicate, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            value = self.metrics().get(name)
            if value is not None and predicate(value):
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} = {value} after {timeout} s")
            time.sleep(0.05)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Sends `sig` and returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def read_sse_events(response):
    """Yields the data of each SSE event of an http.client response, as text."""
    for raw in response:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data: "):
            yield line[len("data: "):]
