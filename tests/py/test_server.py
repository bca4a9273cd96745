"""`cellm serve` driven by the official `openai` client and by raw HTTP: answers, streaming,
16 concurrent streams sharing forwards, disconnects that free their cells, 4xx errors, the
Prometheus text, API keys, overload (429) and graceful shutdown on SIGTERM."""
import json
import signal
import threading
import time

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server_process import ServerProcess, read_sse_events

CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Germany", "Berlin")]
STORY = "Write a very long story about a dragon who learns to cook. Make it at least ten paragraphs."
CONTEXT = 512


def start(cellm_bin, *args):
    try:
        return ServerProcess(cellm_bin, *args)
    except RuntimeError as e:
        if "built without the HTTP server" in str(e):  # e.g. a machine without cpp-httplib
            pytest.skip("cellm was built without the HTTP server")
        raise


@pytest.fixture(scope="module")
def server(cellm_bin, smollm2):
    s = start(cellm_bin, "-m", smollm2, "-c", CONTEXT, "--max-sessions", 16)
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def ask(country):
    return [{"role": "user", "content": f"What is the capital of {country}?"}]


def chat(client, messages, **kwargs):
    return client.chat.completions.create(model="smollm2", messages=messages, **{"temperature": 0, **kwargs})


def stream_text(client, messages, **kwargs):
    """The streamed text, the chunks and the finish reason."""
    chunks = list(chat(client, messages, stream=True, **kwargs))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return text, chunks, finish


def test_chat_completion_answers_paris(client):
    r = chat(client, ask("France"), max_tokens=24)
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.usage.prompt_tokens > 5 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    models = client.models.list()
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct.Q4_1"]
    assert r.model == "SmolLM2-135M-Instruct.Q4_1"


def test_max_tokens_and_stop(client):
    r = chat(client, [{"role": "user", "content": "Count from 1 to 20, separated by commas."}], max_tokens=3)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3
    full = chat(client, ask("France"), max_tokens=24).choices[0].message.content
    cut = chat(client, ask("France"), max_tokens=24, stop=["Paris"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == full[:full.index("Paris")]


def test_streaming_yields_the_same_text(client):
    whole = chat(client, ask("Japan"), max_tokens=32)
    text, chunks, finish = stream_text(client, ask("Japan"), max_tokens=32, stream_options={"include_usage": True})
    assert text == whole.choices[0].message.content and "Tokyo" in text
    assert chunks[0].choices[0].delta.role == "assistant"
    assert finish == [whole.choices[0].finish_reason]
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert sum(c.choices[0].delta.content not in (None, "") for c in chunks if c.choices) > 1  # really streamed


def test_completions_endpoint_streams_the_same_text(client):
    kwargs = dict(model="smollm2", prompt="The capital of France is", max_tokens=8, temperature=0)
    whole = client.completions.create(**kwargs)
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kwargs))
    assert whole.object == "text_completion" and whole.choices[0].text == streamed
    assert "Paris" in streamed
    assert whole.usage.completion_tokens == 8 and whole.choices[0].finish_reason == "length"


def test_sixteen_concurrent_streams_share_forwards(server, client):
    before = server.metrics()
    start = threading.Barrier(16)
    answers = [None] * 16

    def worker(i):
        country, _ = CAPITALS[i % len(CAPITALS)]
        start.wait()
        answers[i] = stream_text(client, ask(country), max_tokens=24)[0]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for i, text in enumerate(answers):
        assert text is not None and CAPITALS[i % len(CAPITALS)][1] in text, (i, text)
    # Same question, same greedy answer, whatever else shared its forwards.
    for i in range(4, 16):
        assert answers[i] == answers[i % 4]
    after = server.metrics()
    steps = after["cellm_steps_total"] - before["cellm_steps_total"]
    sequences = after["cellm_forward_sequences_total"] - before["cellm_forward_sequences_total"]
    assert sequences / steps > 4, (sequences, steps)
    assert after["cellm_max_sequences_per_forward"] >= 8
    server.wait_for_metric("cellm_kv_live_cells", lambda v: v == 0)


def test_client_leaving_a_stream_frees_its_cells(server):
    before = server.metrics()
    conn = server.connection()
    conn.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"},
                 body=json.dumps({"messages": [{"role": "user", "content": STORY}], "stream": True,
                                  "max_tokens": 400, "temperature": 0}))
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")
    events = read_sse_events(response)
    for _ in range(4):
        assert json.loads(next(events))["object"] == "chat.completion.chunk"
    assert server.metrics()["cellm_kv_live_cells"] > 0  # the generation holds cells now
    conn.sock.close()
    conn.close()
    server.wait_for_metric("cellm_kv_live_cells", lambda v: v == 0, timeout=20)
    assert_cancelled_early(server, before)
    assert server.metrics()["cellm_sessions_running"] == 0


def assert_cancelled_early(server, before):
    """The generation (400 tokens asked) stopped soon after its client left."""
    after = server.metrics()
    assert after["cellm_client_disconnects_total"] == before["cellm_client_disconnects_total"] + 1
    generated = after["cellm_generation_tokens_total"] - before["cellm_generation_tokens_total"]
    assert generated < 150, generated


def test_client_leaving_a_plain_request_frees_its_cells(server):
    before = server.metrics()
    conn = server.connection()
    conn.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"},
                 body=json.dumps({"messages": [{"role": "user", "content": STORY}], "max_tokens": 400,
                                  "temperature": 0}))
    server.wait_for_metric("cellm_kv_live_cells", lambda v: v > 0)
    conn.sock.close()  # no response read: nothing is written until the generation ends
    conn.close()
    server.wait_for_metric("cellm_kv_live_cells", lambda v: v == 0, timeout=20)
    assert_cancelled_early(server, before)


def error_of(server, path, body, method="POST"):
    status, headers, text = server.request(method, path, body)
    payload = json.loads(text)
    assert set(payload["error"]) == {"message", "type", "param", "code"}, payload
    return status, payload["error"]


@pytest.mark.parametrize("body,param,words", [
    ('{"messages": [', None, "not valid JSON"),
    ('["not", "an", "object"]', None, "JSON object"),
    ({"model": "m"}, "messages", "required"),
    ({"messages": "hello"}, "messages", "array"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "string"),
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, "temperature", "number"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}, "max_tokens", "between"),
    ({"messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 3}, "n", "must be 1"),
])
def test_malformed_requests_get_400(server, body, param, words):
    status, error = error_of(server, "/v1/chat/completions", body if isinstance(body, str) else json.dumps(body))
    assert status == 400 and error["type"] == "invalid_request_error"
    assert error["param"] == param and words in error["message"], error


def test_a_prompt_longer_than_the_context_gets_400_naming_the_limit(server):
    status, error = error_of(server, "/v1/completions", {"prompt": "word " * (2 * CONTEXT)})
    assert status == 400 and error["code"] == "context_length_exceeded" and error["param"] == "prompt"
    assert str(CONTEXT) in error["message"], error


def test_official_client_raises_on_4xx(client):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, ask("France"), temperature=5)
    assert e.value.status_code == 400 and "temperature" in str(e.value)


def test_unknown_routes_get_404_json(server):
    status, error = error_of(server, "/v1/engines", None, method="GET")
    assert status == 404 and "/v1/engines" in error["message"]


def test_metrics_parse_as_prometheus_text(server):
    server.request("POST", "/v1/chat/completions", "{")  # one 400 to count
    status, headers, text = server.request("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, kind in [("cellm_requests", "counter"), ("cellm_prompt_tokens", "counter"),
                       ("cellm_generation_tokens", "counter"), ("cellm_time_to_first_token_seconds", "histogram"),
                       ("cellm_inter_token_latency_seconds", "histogram"), ("cellm_kv_rows", "gauge"),
                       ("cellm_kv_live_cells", "gauge"), ("cellm_kv_allocated_bytes", "gauge"),
                       ("cellm_kv_bytes_per_cell", "gauge"), ("cellm_sessions_running", "gauge"),
                       ("cellm_sessions_waiting", "gauge"), ("cellm_steps", "counter"),
                       ("cellm_forward_sequences", "counter"), ("cellm_preemptions", "counter"),
                       ("cellm_graph_captures", "counter"), ("cellm_graph_recaptures", "counter")]:
        assert families[name].type == kind, name
    requests = {(s.labels["endpoint"], s.labels["status"]): s.value for s in families["cellm_requests"].samples}
    assert requests[("/v1/chat/completions", "400")] >= 1
    ttft = {s.name: s for s in families["cellm_time_to_first_token_seconds"].samples}
    assert ttft["cellm_time_to_first_token_seconds_count"].value >= 1
    values = server.metrics()
    assert values["cellm_kv_allocated_bytes"] == values["cellm_kv_rows"] * values["cellm_kv_bytes_per_cell"]
    assert values["cellm_prompt_tokens_total"] > 0 and values["cellm_generation_tokens_total"] > 0


@pytest.fixture(scope="module")
def strict_server(cellm_bin, smollm2):
    """One session, one waiting place, an API key."""
    s = start(cellm_bin, "-m", smollm2, "-c", CONTEXT, "--max-sessions", 1, "--max-waiting", 1,
                      "--api-key", "s3cret")
    yield s
    assert s.stop() == 0, "".join(s.log)


def test_api_key_is_required(strict_server):
    body = json.dumps({"messages": ask("France"), "max_tokens": 4})
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        status, _, text = strict_server.request("POST", "/v1/chat/completions", body, headers)
        assert status == 401 and json.loads(text)["error"]["code"] == "invalid_api_key", headers
    assert strict_server.request("GET", "/v1/models")[0] == 401
    assert strict_server.request("GET", "/health")[0] == 200  # probes need no key
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=strict_server.base_url + "/v1", api_key="wrong", max_retries=0).models.list()
    good = openai.OpenAI(base_url=strict_server.base_url + "/v1", api_key="s3cret", max_retries=0)
    assert "Paris" in chat(good, ask("France"), max_tokens=16).choices[0].message.content


def test_a_full_queue_gets_429_with_retry_after(strict_server):
    auth = {"Content-Type": "application/json", "Authorization": "Bearer s3cret"}
    # As many tokens as the context allows, so the running generation is still running when the
    # third request comes (300 tokens took less than the metric polls on a busy CI machine).
    body = json.dumps({"messages": [{"role": "user", "content": STORY}], "max_tokens": CONTEXT - 40, "temperature": 0})
    before = strict_server.metrics()
    submitted, finished = before["cellm_generations_submitted_total"], before["cellm_generations_finished_total"]
    running, waiting = strict_server.connection(), strict_server.connection()
    running.request("POST", "/v1/chat/completions", body, auth)
    strict_server.wait_for_metric("cellm_generations_submitted_total", lambda v: v == submitted + 1)
    strict_server.wait_for_metric("cellm_sessions_running", lambda v: v == 1)
    waiting.request("POST", "/v1/chat/completions", body, auth)
    strict_server.wait_for_metric("cellm_generations_submitted_total", lambda v: v == submitted + 2)
    # Both are ours (the gauges were not left over from the previous test's generation): one runs,
    # one waits, neither has ended.
    strict_server.wait_for_metric("cellm_sessions_waiting", lambda v: v == 1)
    state = strict_server.metrics()
    assert (state["cellm_sessions_running"], state["cellm_generations_finished_total"]) == (1, finished), state
    status, headers, text = strict_server.request("POST", "/v1/chat/completions", body, auth)
    after = {k: v for k, v in strict_server.metrics().items() if k.startswith(("cellm_sessions", "cellm_generations"))}
    assert status == 429 and int(headers["Retry-After"]) >= 1, (text[:200], after)
    assert json.loads(text)["error"]["code"] == "queue_full"
    for conn in (running, waiting):  # leave: both generations are cancelled
        conn.sock.close()
        conn.close()
    strict_server.wait_for_metric("cellm_kv_live_cells", lambda v: v == 0)
    strict_server.wait_for_metric("cellm_sessions_waiting", lambda v: v == 0)


def streaming_request(server, max_tokens):
    conn = server.connection()
    conn.request("POST", "/v1/chat/completions", headers={"Content-Type": "application/json"},
                 body=json.dumps({"messages": [{"role": "user", "content": STORY}], "stream": True,
                                  "max_tokens": max_tokens, "temperature": 0}))
    response = conn.getresponse()
    assert response.status == 200
    return conn, read_sse_events(response)


def test_sigterm_lets_running_streams_finish(cellm_bin, smollm2):
    s = start(cellm_bin, "-m", smollm2, "-c", CONTEXT, "--grace-seconds", 120)  # ample on a busy machine
    conn, events = streaming_request(s, 32)
    next(events)
    s.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    while s.request("GET", "/health")[0] != 503:  # draining: balancers look elsewhere
        assert time.monotonic() < deadline
        time.sleep(0.02)
    status, headers, text = s.request("POST", "/v1/chat/completions", {"messages": ask("France")})
    assert status == 503 and "Retry-After" in headers and json.loads(text)["error"]["code"] == "shutting_down"
    rest = list(events)
    assert rest[-1] == "[DONE]"
    assert json.loads(rest[-2])["choices"][0]["finish_reason"] == "length"
    assert s.proc.wait(30) == 0, "".join(s.log)


def test_sigint_cancels_what_outlives_the_grace_period(cellm_bin, smollm2):
    s = start(cellm_bin, "-m", smollm2, "-c", CONTEXT, "--grace-seconds", 0.5)
    conn, events = streaming_request(s, 450)
    next(events)
    started = time.monotonic()
    s.proc.send_signal(signal.SIGINT)
    rest = list(events)
    assert rest[-1] == "[DONE]"
    assert json.loads(rest[-2])["error"]["code"] == "cancelled"
    assert s.proc.wait(30) == 0, "".join(s.log)
    assert time.monotonic() - started < 15
