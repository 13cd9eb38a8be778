"""A real, scriptable OpenAI-compatible chat server for tests (127.0.0.1 only, no network).

``POST /v1/chat/completions`` answers in plain JSON or, when the body asks for
``"stream": true``, as server-sent events sent with chunked transfer encoding (as
OpenAI does): one ``data:`` line per delta, a final chunk with ``finish_reason``
(and ``usage`` when set), then ``data: [DONE]``. Every request is recorded before it
is answered. Router calls (system prompt "Classify the user's message ..."), answerability
judge calls (system prompt "Answerability check." or "可回答性检查。"), answer grading calls
(system prompt "Grade an answer.") and writer calls hit the same endpoint; each kind has its own script. ``POST
/v1/embeddings`` answers too (kind "embeddings", deterministic 8-d vectors), so the retry
policy of every HTTP provider is tested against one server: ``script.fail(n, 503)``
fails the next n requests of a kind, and ``attempts(kind)`` counts what arrived.
benchmarks.load_api serves it as a slow LLM writer (``delta_delay_s``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ROUTER_MARK = "Classify the user's message"
JUDGE_MARKS = ("Answerability check.", "可回答性检查。")
GRADER_MARK = "Grade an answer."  # sunlib.evaluate.grading's rubric (``sunlib eval rag --judge``)
HEADER = re.compile(r"^\[Source (\d+)\] chunk_id=(\S+) note=(\S+)")

Reply = str | Callable[[dict[str, Any]], str]


@dataclass
class Script:
    """How the server answers one kind of request (writer, router or judge)."""

    reply: Reply = "OK."
    echo: bool = False  # reply with the user message it received
    statuses: deque[int] = field(default_factory=deque)  # popped one per request; empty -> 200
    retry_after: str | None = "0"  # sent with error statuses (0: retry at once, keeps tests fast)
    malformed: bool = False  # a 200 whose body (or stream data line) is not JSON
    data_lines: list[str] | None = None  # stream: send exactly these data lines (then end the body)
    bad_gzip: bool = False  # a 200 that says Content-Encoding: gzip but is not gzip
    cut_after: int | None = None  # stream: close the connection after this many deltas
    cut_chunked: bool = True  # cut inside a chunked body (else: a close-delimited body that just ends)
    cut_times: int | None = None  # only the first n streamed requests are cut (None: all)
    sleep_s: float = 0.0  # before answering
    sleep_times: int | None = None  # only the first n requests sleep (None: all)
    usage: dict[str, int] | None = None
    delta_size: int = 6  # characters per streamed delta
    delta_delay_s: float = 0.0  # stream: pause after each delta (a slow LLM writing)
    after_first_delta: threading.Event | None = None  # wait for it (set by the client) after delta 1
    waited_ok: bool | None = None  # whether that event was set in time
    tool_calls: list[tuple[str, str, str]] | None = None  # reply with these (id, name, arguments) calls

    def fail(self, times: int, status: int = 503, retry_after: str | None = "0") -> None:
        """The next ``times`` requests of this kind get ``status`` (with this Retry-After), then 200s."""
        self.statuses = deque([status] * times)
        self.retry_after = retry_after


def user_message(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def system_message(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "system")


def vector(text: str, dim: int = 8) -> list[float]:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [b / 255.0 - 0.5 for b in digest[:dim]]


def sources(prompt: str) -> dict[str, dict[str, str]]:
    """chunk_id -> {"note", "fence", "text"} for every ``[Source n]`` block of a writer prompt."""
    lines = prompt.split("\n")
    out: dict[str, dict[str, str]] = {}
    i = 0
    while i < len(lines):
        m = HEADER.match(lines[i])
        if m is None:
            i += 1
            continue
        fence = lines[i + 1]
        end = lines.index(fence, i + 2)
        out[m.group(2)] = {"note": m.group(3), "fence": fence, "text": "\n".join(lines[i + 2 : end])}
        i = end + 1
    return out


class ChatServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.writer = Script()
        self.router = Script(reply='{"route": "rag", "reason": "needs the notes", "confidence": 0.8}')
        self.judge = Script(reply='{"answerable": true, "reason": "the evidence states it"}')
        self.grader = Script(reply='{"relevance": 5, "completeness": 4, "accuracy": 5, "reason": "matches"}')
        self.embeddings = Script()
        self.url = ""
        self.stopping = threading.Event()

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["kind"] == kind]

    def bodies(self, kind: str) -> list[dict[str, Any]]:
        return [r["body"] for r in self.of_kind(kind)]

    def attempts(self, kind: str) -> int:
        """How many requests of this kind arrived (each retry is one more)."""
        with self.lock:
            return len(self.of_kind(kind))

    # -- answering -------------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in h.headers.items()}
        body = json.loads(raw)
        if h.path == "/v1/embeddings":
            kind, script = "embeddings", self.embeddings
        elif any(m["role"] == "system" and m["content"].startswith(ROUTER_MARK) for m in body["messages"]):
            kind, script = "router", self.router
        elif any(m["role"] == "system" and m["content"].startswith(JUDGE_MARKS) for m in body["messages"]):
            kind, script = "judge", self.judge
        elif any(m["role"] == "system" and m["content"].startswith(GRADER_MARK) for m in body["messages"]):
            kind, script = "grader", self.grader
        else:
            kind, script = "writer", self.writer
        with self.lock:
            self.requests.append({"path": h.path, "headers": headers, "body": body, "kind": kind})
            nth = len(self.of_kind(kind))
            status = script.statuses.popleft() if script.statuses else 200
        if h.path not in ("/v1/chat/completions", "/v1/embeddings"):
            return _send(h, 404, _err(f"no route {h.path}"))
        if script.sleep_s and (script.sleep_times is None or nth <= script.sleep_times):
            deadline = time.monotonic() + script.sleep_s
            while time.monotonic() < deadline and not self.stopping.is_set():
                time.sleep(0.02)
        if status != 200:
            extra = {"Retry-After": script.retry_after} if script.retry_after is not None else {}
            return _send(h, status, _err(f"scripted failure {status} (request {nth})"), extra)
        if kind == "embeddings":
            data = [{"index": i, "embedding": vector(t)} for i, t in enumerate(body["input"])]
            return _send(h, 200, json.dumps({"object": "list", "data": data}).encode())
        text = user_message(body) if script.echo else (script.reply(body) if callable(script.reply) else script.reply)
        if script.bad_gzip:
            return _send(h, 200, b"this is not gzip data", {"Content-Encoding": "gzip"})
        if body.get("stream"):
            cut = script.cut_after if script.cut_times is None or nth <= script.cut_times else None
            return self._stream(h, script, text, cut)
        if script.malformed:
            return _send(h, 200, b'{"choices": [{"message": {"content": "unterminated')
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = "stop"
        if script.tool_calls is not None:
            message = {"role": "assistant", "content": None, "tool_calls": _calls(script.tool_calls)}
            finish = "tool_calls"
        payload: dict[str, Any] = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if script.usage is not None:
            payload["usage"] = script.usage
        _send(h, 200, json.dumps(payload).encode())

    def _wait(self, event: threading.Event, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not event.wait(0.02):
            if time.monotonic() > deadline or self.stopping.is_set():
                return False
        return True

    def _stream(self, h: BaseHTTPRequestHandler, script: Script, text: str, cut_after: int | None) -> None:
        chunked = cut_after is None or script.cut_chunked
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        if chunked:
            h.send_header("Transfer-Encoding", "chunked")
        else:
            h.send_header("Connection", "close")
        h.end_headers()

        def emit(data: str) -> None:
            line = f"data: {data}\n\n".encode()
            h.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n" if chunked else line)
            h.wfile.flush()

        try:
            if script.data_lines is not None:
                for data in script.data_lines:
                    emit(data)
            elif script.malformed:
                emit('{"choices": [{"delta": {"content": "unterminated')
                emit("[DONE]")
            elif script.tool_calls is not None:
                for data in _call_deltas(script.tool_calls, script.delta_size):
                    emit(data)
            else:
                for n, delta in enumerate(_pieces(text, script.delta_size)):
                    if cut_after is not None and n >= cut_after:
                        h.close_connection = True
                        return  # no terminating chunk, no finish_reason, no [DONE]
                    emit(json.dumps({"choices": [{"index": 0, "delta": {"content": delta}, "finish_reason": None}]}))
                    if n == 0 and script.after_first_delta is not None:
                        script.waited_ok = self._wait(script.after_first_delta, 5.0)
                    if script.delta_delay_s:
                        time.sleep(script.delta_delay_s)
                if cut_after is not None:
                    h.close_connection = True
                    return
                emit(json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
                if script.usage is not None:
                    emit(json.dumps({"choices": [], "usage": script.usage}))
                emit("[DONE]")
            if chunked:
                h.wfile.write(b"0\r\n\r\n")
                h.wfile.flush()
            else:
                h.close_connection = True
        except OSError:  # the client went away
            h.close_connection = True


def _calls(calls: list[tuple[str, str, str]]) -> list[dict[str, Any]]:
    return [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]


def _call_deltas(calls: list[tuple[str, str, str]], size: int) -> Iterator[str]:
    """As OpenAI streams tool calls: id and name first, then the arguments in pieces, then the finish."""
    for index, (call_id, name, arguments) in enumerate(calls):
        head = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        yield json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [head]}, "finish_reason": None}]})
        for piece in _pieces(arguments, size):
            tail = {"index": index, "function": {"arguments": piece}}
            yield json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [tail]}, "finish_reason": None}]})
    yield json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    yield "[DONE]"


def _pieces(text: str, size: int) -> Iterator[str]:
    for i in range(0, len(text), size):
        yield text[i : i + size]


def _err(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "test_error", "code": None}}).encode()


def _send(h: BaseHTTPRequestHandler, status: int, payload: bytes, extra: dict[str, str] | None = None) -> None:
    try:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(payload)
        h.wfile.flush()
    except OSError:  # the client gave up (timeout tests)
        h.close_connection = True


def start() -> tuple[ChatServer, Callable[[], None]]:
    """A running server and the function that stops it."""
    state = ChatServer()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            state.handle(self)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()

    def stop() -> None:
        state.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)

    return state, stop
