"""Fuzz the HTTP API with schemathesis against its own OpenAPI schema, on a live server.

Copies the bundled sample vault into a temp folder, indexes it with the ``hash``
embedder into a temp index folder, serves ``create_app`` under uvicorn on a free
127.0.0.1 port in a thread, then runs ``schemathesis run`` (the CLI of the installed
schemathesis, as a subprocess) on ``http://127.0.0.1:PORT/openapi.json``: every
operation, ``--max-examples`` per operation, all phases (examples, coverage, fuzzing,
stateful), positive and negative data.

Two passes, reported separately:

- ``crash`` pass, check ``not_a_server_error``: a 5xx (or a dropped connection) is a bug.
- ``schema`` pass, checks ``response_schema_conformance``, ``content_type_conformance`` and
  ``status_code_conformance``: does every response match what /openapi.json declares?

The SSE endpoints (``POST /api/ask/stream``, ``GET /api/benchmarks/rag/runs/{id}/events``)
answer ``text/event-stream``; schemathesis sends them requests like any other (status
checked), and the stream bodies are checked by a hand-written hypothesis fuzz here: any
JSON body to /api/ask/stream answers < 500, and a 200 stream's first event is a known
event name with JSON data.

Prints the figures and writes them into docs/reliability.md between ``<!-- fuzz:start -->``
and ``<!-- fuzz:end -->`` (appended when the markers are absent; the rest of the file is
left as it is, re-read right before writing).

    python -m tests.harness.fuzz_api                          # 50 examples per operation
    python -m tests.harness.fuzz_api --max-examples 10 --no-write
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from sunlib import Library
from sunlib.server import create_app

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = ROOT / "src" / "sunlib" / "sample_vault"
DOC = ROOT / "docs" / "reliability.md"
START, END = "<!-- fuzz:start -->", "<!-- fuzz:end -->"
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
STREAM_EVENTS = {"step", "context_built", "token", "citations", "finish", "error"}
# Streams that never end by themselves (a live feed): schemathesis reads each 200 until its request
# timeout, so they get a short one; the status and the first event arrive at once.
ENDLESS_STREAMS = ("/api/index/files/events",)
ENDLESS_STREAM_TIMEOUT_S = 2.0
PASSES = {
    "crash": "not_a_server_error",
    "schema": "not_a_server_error,response_schema_conformance,content_type_conformance,status_code_conformance",
}


# -- the live server --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def live_server(workdir: Path) -> Iterator[str]:
    """The sample vault copied into workdir, indexed (hash), served on a free loopback port."""
    vault = workdir / "vault"
    shutil.copytree(SAMPLE_VAULT, vault, ignore=shutil.ignore_patterns(".sunlib"))
    lib = Library.open(vault, embedding={"provider": "hash"}, index_dir=workdir / "index")
    lib.index()
    port = free_port()
    config = uvicorn.Config(create_app(lib), host="127.0.0.1", port=port, log_level="critical", lifespan="on")
    server = uvicorn.Server(config)
    logging.getLogger("asyncio").setLevel(logging.ERROR)  # "socket.send() raised" when a client hangs up
    logging.getLogger("sunlib.server").setLevel(logging.CRITICAL)  # 500s are counted from the responses
    thread = threading.Thread(target=server.run, daemon=True, name="fuzz-server")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        lib.close()


# -- schemathesis -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    operation: str
    check: str
    code: str
    title: str
    message: str  # the check's own message, first line
    request: str  # METHOD uri (the first one seen)
    status: int | None
    body: str  # the response body, start

    @property
    def server_error(self) -> bool:
        return self.check == "not_a_server_error" or (self.status is not None and self.status >= 500)

    def key(self) -> tuple[str, str, str]:
        return (self.operation, self.code, self.message)

    def line(self) -> str:
        status = f" -> {self.status}" if self.status is not None else ""
        body = f" `{self.body}`" if self.server_error and self.body else ""
        what = f"{self.code} {self.title}" + (f" ({self.message})" if self.message else "")
        return f"`{self.operation}` {what}: e.g. `{self.request[:160]}`{status}{body}"


@dataclass
class PassResult:
    name: str
    checks: str
    returncode: int = 0
    seconds: float = 0.0
    operations: int = 0
    operations_tested: int = 0
    test_cases: int = 0
    failures: list[Failure] = field(default_factory=list)  # distinct: operation + code + message
    errors: list[str] = field(default_factory=list)
    summary: str = ""


def run_schemathesis(
    base: str, name: str, checks: str, max_examples: int, seed: int, report_dir: Path, extra: tuple[str, ...] = ()
) -> PassResult:
    report = report_dir / f"{name}.ndjson"
    config = report_dir / f"{name}.schemathesis.toml"
    config.write_text(
        "".join(
            f'[[operations]]\ninclude-path = "{path}"\nrequest-timeout = {ENDLESS_STREAM_TIMEOUT_S}\n\n'
            for path in ENDLESS_STREAMS
        ),
        encoding="utf-8",
    )
    cmd = [
        str(SCHEMATHESIS),
        "--config-file",
        str(config),
        "run",
        f"{base}/openapi.json",
        "--checks",
        checks,
        "--max-examples",
        str(max_examples),
        "--seed",
        str(seed),
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--suppress-health-check",
        "all",
        "--no-shrink",
        "--continue-on-failure",
        "--report",
        "ndjson",
        "--report-ndjson-path",
        str(report),
        "--warnings",
        "off",
        *extra,
    ]
    t0 = time.monotonic()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    # cwd: schemathesis keeps a crash cache (.schemathesis/) in its working folder; one per run, not in the repo
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, cwd=report_dir)
    result = PassResult(name, checks, proc.returncode, time.monotonic() - t0)
    result.summary = proc.stdout[-6000:]
    _parse_ndjson(report, result)
    _parse_text(proc.stdout, result)
    return result


def _parse_ndjson(path: Path, result: PassResult) -> None:
    """Distinct failures (operation + check code + message) from schemathesis' NDJSON event stream."""
    if not path.is_file():
        return
    seen: set[tuple[str, str, str]] = set()
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if '"failure"' not in line and "NonFatalError" not in line:
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            for kind, data in event.items() if isinstance(event, dict) else ():
                if kind == "ScenarioFinished":
                    for failure in _failures_in(data):
                        if failure.key() not in seen:
                            seen.add(failure.key())
                            result.failures.append(failure)
                elif kind == "NonFatalError" and isinstance(data, dict):
                    info = data.get("info") or {}
                    msg = info.get("message") if isinstance(info, dict) else str(info)
                    result.errors.append(f"{data.get('label') or '?'}: {str(msg)[:200]}")


def _failures_in(data: Any) -> list[Failure]:
    """Failed checks in a ScenarioFinished event, with the request and response that failed."""
    out: list[Failure] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("checks"), dict) and isinstance(node.get("interactions"), dict):
                for case_id, checks in node["checks"].items():
                    for check in checks if isinstance(checks, list) else ():
                        if str(check.get("status", "")).lower() == "failure":
                            out.append(_failure(check, node["interactions"].get(case_id) or {}))
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    return out


def _failure(check: dict[str, Any], interaction: dict[str, Any]) -> Failure:
    fail = (check.get("failure_info") or {}).get("failure") or {}
    request = interaction.get("request") or {}
    response = interaction.get("response") or {}
    body = ""
    content = response.get("content")
    if isinstance(content, dict) and "$base64" in content:
        body = base64.b64decode(content["$base64"]).decode("utf-8", "replace")
    elif isinstance(content, str):
        body = content
    message = str(fail.get("message") or "").strip().splitlines()
    return Failure(
        operation=str(fail.get("operation") or "?"),
        check=str(check.get("name") or "?"),
        code=str(fail.get("code") or ""),
        title=str(fail.get("title") or ""),
        message=message[0][:160] if message else "",
        request=f"{request.get('method', '?')} {request.get('uri', '?')}",
        status=response.get("status_code"),
        body=" ".join(body.split())[:160],
    )


def _parse_text(stdout: str, result: PassResult) -> None:
    m = re.search(r"Selected:\s+(\d+)/(\d+)", stdout)
    if m:
        result.operations = int(m.group(2))
    m = re.search(r"Tested:\s+(\d+)", stdout)
    if m:
        result.operations_tested = int(m.group(1))
    m = re.search(r"Test cases:\s+(\d+) generated", stdout)
    if m:
        result.test_cases = int(m.group(1))


# -- the SSE fuzz (bodies of /api/ask/stream) -------------------------------------------------


@dataclass
class StreamResult:
    examples: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    first_events: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def first_event(text: str) -> tuple[str, Any] | None:
    """The first SSE event with data: (name, parsed JSON)."""
    for block in text.replace("\r\n", "\n").split("\n\n"):
        event, data = "message", []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
        if data:
            return event, json.loads("\n".join(data))
    return None


def check_stream_response(status: int, content_type: str, text: str) -> str | None:
    """None when fine, else what is wrong with one /api/ask/stream response."""
    if status >= 500:
        return f"status {status}: {text[:200]}"
    if status != 200:
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            return f"status {status} with a non-JSON body: {text[:200]}"
        if not (isinstance(body, dict) and set(body) == {"error", "message"}):
            return f"status {status} body is not {{error, message}}: {text[:200]}"
        return None
    if not content_type.startswith("text/event-stream"):
        return f"200 with content-type {content_type}"
    try:
        first = first_event(text)
    except json.JSONDecodeError as exc:
        return f"first event data is not JSON ({exc})"
    if first is None:
        return "200 stream without any event"
    if first[0] not in STREAM_EVENTS or not isinstance(first[1], dict):
        return f"unexpected first event {first[0]!r}"
    if '"internal_error"' in text:  # a 500 in disguise: the run failed on a bug
        return "200 stream with an internal_error event"
    return None


def fuzz_stream(base: str, max_examples: int, seed: int) -> StreamResult:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    result = StreamResult()
    # text with lone surrogates too: JSON can carry them ("\\ud800"), hypothesis' default text never does
    text = st.text(max_size=300) | st.text(st.characters(codec=None, categories=["Cs", "Ll", "Nd"]), max_size=5)
    json_scalar = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text
    filters = st.fixed_dictionaries(
        {},
        optional={
            "folders": st.lists(text, max_size=3) | json_scalar,
            "tags": st.lists(text, max_size=3) | json_scalar,
            "note_ids": st.lists(text, max_size=3),
            "since": st.floats(allow_nan=False) | json_scalar,
            "until": st.floats(allow_nan=False),
            "metadata": st.dictionaries(text, text, max_size=3) | json_scalar,
            "bogus": json_scalar,
        },
    )
    body = (
        st.fixed_dictionaries({"question": text}, optional={"filters": filters | json_scalar})
        | st.fixed_dictionaries({"question": json_scalar})
        | st.dictionaries(text, json_scalar, max_size=3)
        | json_scalar
        | st.lists(json_scalar, max_size=3)
    )

    with httpx.Client(base_url=base, timeout=60) as client:

        @hseed(seed)
        @settings(
            max_examples=max_examples,
            deadline=None,
            derandomize=False,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(body)
        def one(payload: Any) -> None:
            raw = json.dumps(payload).encode()  # ASCII escapes: lone surrogates survive as \\udXXX
            r = client.post("/api/ask/stream", content=raw, headers={"content-type": "application/json"})
            result.examples += 1
            result.statuses[r.status_code] = result.statuses.get(r.status_code, 0) + 1
            problem = check_stream_response(r.status_code, r.headers.get("content-type", ""), r.text)
            if problem is not None:
                result.problems.append(f"{json.dumps(payload, ensure_ascii=False)[:120]} -> {problem}")
            elif r.status_code == 200:
                name = first_event(r.text)[0]  # type: ignore[index]
                result.first_events[name] = result.first_events.get(name, 0) + 1

        one()

        # raw bodies hypothesis' JSON cannot produce: not JSON, wrong content types, invalid UTF-8
        for raw, ctype in (
            (b"{not json", "application/json"),
            (b"\xff\xfe\x00", "application/json"),
            (b'{"question": "x"}', "text/plain"),
            (b"", "application/json"),
            (b'{"question": "\\ud800"}', "application/json"),
        ):
            r = client.post("/api/ask/stream", content=raw, headers={"content-type": ctype})
            result.examples += 1
            result.statuses[r.status_code] = result.statuses.get(r.status_code, 0) + 1
            problem = check_stream_response(r.status_code, r.headers.get("content-type", ""), r.text)
            if problem is not None:
                result.problems.append(f"raw {raw[:40]!r} ({ctype}) -> {problem}")
    return result


# -- report -----------------------------------------------------------------------------------


def render(passes: list[PassResult], stream: StreamResult, max_examples: int, seed: int) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    lines = [
        "## API fuzzing (schemathesis)",
        "",
        f"`python -m tests.harness.fuzz_api --max-examples {max_examples} --seed {seed}` ({when}): schemathesis "
        f"{_schemathesis_version()} against `/openapi.json` of a live server (uvicorn, 127.0.0.1) over a copy "
        "of the sample vault (hash embedder); every operation, all phases (examples, coverage, fuzzing, "
        "stateful), positive and negative data, nothing excluded. A fresh server and vault per pass.",
        "",
        "| pass | checks | operations | test cases | server errors (5xx) | other failures | time |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in passes:
        server = [f for f in p.failures if f.server_error]
        lines.append(
            f"| {p.name} | {p.checks.replace(',', ', ')} | {p.operations_tested}/{p.operations} | {p.test_cases} "
            f"| {len(server)} | {len(p.failures) - len(server)} | {p.seconds:.0f} s |"
        )
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(stream.statuses.items()))
    firsts = ", ".join(f"{k}: {v}" for k, v in sorted(stream.first_events.items()))
    lines += [
        f"| ask/stream bodies (hypothesis) | status < 500; a 200 stream's first event is a known event with "
        f"JSON data | 1 | {stream.examples} | {sum(1 for x in stream.problems if 'status 5' in x)} "
        f"| {sum(1 for x in stream.problems if 'status 5' not in x)} | |",
        "",
        f"Failures are distinct (operation, check, message). SSE body fuzz statuses: {statuses or '-'}; "
        f"first events of 200 streams: {firsts or '-'}.",
        "",
        "`make fuzz` runs this script as above (50 examples, seed 5). `make test` runs a bounded crash pass "
        "(`tests/system/test_bad_input.py`: every operation and phase, 5 examples per operation, seed 7). A 200 of "
        "the endless file feed (`GET /api/index/files/events`) is read for 2 s, then closed.",
        "",
    ]
    server_errors = {(f.operation, f.body): f for p in passes for f in p.failures if f.server_error}
    if server_errors:
        lines += ["Server errors:", ""] + [f"- {f.line()}" for f in server_errors.values()] + [""]
    other = {f.key(): f for p in passes for f in p.failures if not f.server_error}
    if other:
        lines += ["Schema mismatches (the response is fine, /openapi.json does not declare it):", ""]
        by_kind: dict[str, list[str]] = {}
        for f in other.values():
            by_kind.setdefault(f"{f.code} {f.title} ({f.message})", []).append(f"`{f.operation}`")
        lines += [f"- {kind}: {', '.join(sorted(set(ops)))}" for kind, ops in sorted(by_kind.items())]
        lines.append("")
    errors = [e for p in passes for e in p.errors]
    if errors:
        lines += ["Schemathesis errors: " + "; ".join(errors[:10]), ""]
    if stream.problems:
        lines += ["SSE fuzz problems:", ""] + [f"- {x}" for x in stream.problems[:20]] + [""]
    return "\n".join(lines).rstrip() + "\n"


def _schemathesis_version() -> str:
    try:
        from importlib.metadata import version

        return version("schemathesis")
    except Exception:
        return "?"


def write_section(section: str, doc: Path = DOC) -> None:
    """Replace (or append) the marked section; everything else in the file stays as it is."""
    block = f"{START}\n{section.rstrip()}\n{END}\n"
    text = doc.read_text("utf-8") if doc.is_file() else "# Reliability\n"  # re-read right before writing
    if START in text and END in text and text.index(START) < text.index(END):
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + block + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    tmp = doc.with_name(doc.name + ".fuzz-tmp")
    tmp.write_text(text, "utf-8")
    os.replace(tmp, doc)


# -- main -------------------------------------------------------------------------------------


def run(max_examples: int, seed: int, passes: list[str], stream_examples: int) -> tuple[list[PassResult], StreamResult]:
    with tempfile.TemporaryDirectory(prefix="sunlib-fuzz-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        results = []
        for name in passes:  # a fresh server and vault per pass: one pass's writes do not steer the next
            with live_server(work / name) as base:
                results.append(run_schemathesis(base, name, PASSES[name], max_examples, seed, work))
        with live_server(work / "stream") as base:
            stream = fuzz_stream(base, stream_examples, seed)
    return results, stream


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=50, help="schemathesis examples per operation")
    parser.add_argument("--stream-examples", type=int, default=None, help="hypothesis bodies for /api/ask/stream")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--passes", default="crash,schema", help="comma-separated: crash, schema")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/reliability.md alone")
    parser.add_argument("--verbose", action="store_true", help="print schemathesis' own summaries")
    args = parser.parse_args()
    passes = [p for p in args.passes.split(",") if p]
    t0 = time.monotonic()
    results, stream = run(args.max_examples, args.seed, passes, args.stream_examples or args.max_examples * 2)
    if args.verbose:
        for p in results:
            print(f"===== {p.name} (exit {p.returncode}) =====\n{p.summary}")
    section = render(results, stream, args.max_examples, args.seed)
    print(section)
    print(f"total {time.monotonic() - t0:.0f} s")
    if not args.no_write:
        write_section(section)
        print(f"wrote {DOC.relative_to(ROOT)}")
    server_errors = any(f.server_error for p in results for f in p.failures)
    return 1 if server_errors or stream.problems else 0


if __name__ == "__main__":
    sys.exit(main())
