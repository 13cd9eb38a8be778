"""The Evaluate page end to end: a real server on loopback, driven by Debian's chromium (playwright).

From the page: pick a QA set inside the vault, run it (the benchmark API, progress over SSE), see
the report in its sandboxed frame, run again, and compare the two saved evaluations. The vault is a
copy of the sample vault with the session's hash index; nothing shared is modified. The API part
checks that a saved evaluation follows the runs ACL rule.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_web_e2e import serve  # also skips this module without chromium or playwright

from sunlib import Library
from sunlib.evaluate.history import save_eval
from sunlib.evaluate.report import EvalRun
from sunlib.server.app import WEB_DIR
from tests.support.eval_data import TINY, write_jsonl
from tests.support.paths import ROOT, place_index

SAMPLE_VAULT = ROOT / "src" / "sunlib" / "sample_vault"
GATE = {"gate": "score", "gate_cosine_weight": 0.0, "gate_threshold": 0.7}  # as test_eval_rag's HASH_TOML


@pytest.fixture(scope="module")
def eval_server(tmp_path_factory: pytest.TempPathFactory, hash_index: Path) -> Iterator[tuple[str, Library]]:
    root = tmp_path_factory.mktemp("web_eval")
    vault = root / "vault"
    shutil.copytree(SAMPLE_VAULT, vault, ignore=shutil.ignore_patterns(".sunlib"))
    place_index(vault, hash_index, home=root / "home")
    (vault / "evals").mkdir()
    write_jsonl(vault / "evals" / "tiny.jsonl", TINY)
    with pytest.MonkeyPatch.context() as env:
        for key in [k for k in os.environ if k.startswith("SUNLIB_")]:
            env.delenv(key)
        env.setenv("SUNLIB_HOME", str(root / "home"))
        lib = Library.open(vault, embedding={"provider": "hash"}, answer=GATE)
        lib.index()
        try:
            with serve(lib) as url:
                yield url, lib
        finally:
            lib.close()


def run_from_page(page: Any, limit: str) -> str:
    page.select_option("#eval-qa", "evals/tiny.jsonl")
    page.fill("#eval-limit", limit)
    page.click("#eval-start")
    # the first question loads the models: allow for a busy machine
    page.wait_for_function("document.querySelector('#eval-status').textContent.startsWith('Done')", timeout=180_000)
    status = page.inner_text("#eval-status")
    found = re.search(r"saved as (eval-[0-9a-f]{12})", status)
    assert found is not None, status
    # the saved list is reloaded right after the status says Done
    page.wait_for_selector(f"#eval-list tbody tr[data-eval='{found.group(1)}']", state="attached")
    return found.group(1)


def test_run_an_evaluation_open_its_report_and_compare_two(eval_server: tuple[str, Library], page: Any) -> None:
    url, _ = eval_server
    outside: list[str] = []
    page.on("request", lambda r: None if r.url.startswith((url, "about:", "data:")) else outside.append(r.url))
    page.goto(url + "/#evaluate")
    page.wait_for_selector("#eval-qa option[value='evals/tiny.jsonl']", state="attached")
    options = page.eval_on_selector_all("#eval-qa option", "os => os.map(o => o.value)")
    assert options[:2] == ["sample_vault", "sample_vault_calibration"] and "evals/tiny.jsonl" in options

    first = run_from_page(page, "")
    assert "Done: 4 of 4 questions" in page.inner_text("#eval-status")
    assert page.get_attribute("#eval-progress", "value") == "1"
    report = page.frame_locator("#eval-report")
    report.locator("h2", has_text="Headline metrics").wait_for()
    assert report.locator("table#questions tbody tr").count() == 4
    assert report.locator(".plot-container").count() >= 4  # plotly drew the charts inside the sandbox
    report.locator("#f-answerable").select_option("no")  # the table's own filter runs in the frame
    assert report.locator("#f-count").inner_text() == "1 of 4 shown"

    second = run_from_page(page, "2")
    rows = page.locator("#eval-list tbody tr")
    assert rows.count() == 2 and rows.nth(0).get_attribute("data-eval") == second
    assert page.is_disabled("#eval-compare")
    page.check(f"input[name='eval-then'][value='{first}']")
    page.check(f"input[name='eval-now'][value='{second}']")
    page.click("#eval-compare")
    page.wait_for_function("document.querySelector('#eval-compare-status').textContent.includes('better')")
    assert page.inner_text("#eval-compare-status") == f"{second} against {first}: 0 better, 0 worse"
    report.locator("th", has_text="baseline").first.wait_for()
    assert report.locator("h2", has_text="Got worse").count() == 1
    assert page.get_attribute("#eval-report", "data-baseline") == first
    assert page.get_attribute("#eval-report", "sandbox") == "allow-scripts"
    assert outside == []  # the page and its report load nothing from elsewhere


def test_saved_evaluations_follow_the_runs_acl_rule(eval_server: tuple[str, Library]) -> None:
    url, lib = eval_server
    secret = save_eval(lib.store, EvalRun({"questions": 1}), "ops.jsonl", ("ops", "public"))
    listed = httpx.get(f"{url}/api/evals").json()["evals"]
    assert secret not in [e["eval_id"] for e in listed]
    for path in (f"/api/evals/{secret}", f"/api/evals/{secret}/report", "/api/evals/eval-000000000000"):
        r = httpx.get(url + path)
        assert r.status_code == 404 and r.json()["error"] == "not_found", path
    if listed:
        r = httpx.get(f"{url}/api/evals/{listed[0]['eval_id']}/compare/{secret}")
        assert r.status_code == 404


def test_evaluate_js_never_builds_html_from_data() -> None:
    text = (WEB_DIR / "evaluate.js").read_text(encoding="utf-8")
    assert '"/static/evaluate.js"' in (WEB_DIR / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text)
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in text, sink
