"""How often the answer grader (``sunlib eval rag --judge``) agrees with known verdicts, on a real small model.

usage: python -m benchmarks.grader_agreement [--set benchmarks/grader_verdicts.jsonl] [--home DIR]
                                             [--url URL --model NAME] [--out FILE] [--limit N]

``benchmarks/grader_verdicts.jsonl`` holds 30 answers over the bundled sample vault whose verdict
is known: 10 right answers to answerable questions, 10 deliberately wrong ones (a wrong number, a
reversed fact), 6 refusals (3 of unanswerable questions: right; 3 of answerable ones: wrong) and
4 confident answers to unanswerable questions (wrong). Each item names a question of the shipped
QA set (``src/sunlib/qa/sample_vault.jsonl``); the question, the reference answer and the cited
evidence (the paragraph of a gold note that holds a gold phrase, or the item's own ``evidence``)
come from there and from the sample vault.

The grader reads each answer with the fixed rubric (``sunlib.evaluate.grading``); its verdict is
"correct" when the judged accuracy is at least ``PASS_MARK``. Refusals are scored without the
model. The agreement is the share of items whose verdict is the known one; an item the grader
could not judge (a malformed reply twice) counts as a disagreement and is reported apart.

The model: with ``--url`` an OpenAI-compatible server that is already running; otherwise the
llama.cpp server and Qwen2.5-Coder-1.5B-Instruct Q4_K_M that ``benchmarks/llm_judge.py``
installs under ``--home``, started here on a free loopback port with one thread.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import llm_judge  # the runtime, the model and the server of the judge benchmark
from benchmarks.common import ROOT, SAMPLE_VAULT, TEST_QA
from sunlib.config import LLMSettings
from sunlib.evaluate.grading import PASS_MARK, RUBRIC_VERSION, AnswerGrader, GradeInput
from sunlib.providers.chat.openai import OpenAIChatModel


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def paragraph(path: str, phrase: str) -> str:
    """The paragraph (blank-line separated block) of a sample-vault note that holds ``phrase``."""
    text = (SAMPLE_VAULT / path).read_text(encoding="utf-8")
    for block in text.split("\n\n"):
        if _norm(phrase) in _norm(block):
            return block.strip()
    raise SystemExit(f"{path}: no paragraph holds {phrase!r}")


def evidence(item: dict[str, Any], case: dict[str, Any]) -> tuple[str, ...]:
    if item.get("refused"):
        return ()
    if item.get("evidence"):
        return tuple(paragraph(p, phrase) for p, phrase in item["evidence"])
    for path in case["gold_files"]:
        for phrase in case["gold_phrases"]:
            try:
                return (paragraph(path, phrase),)
            except SystemExit:
                continue
    raise SystemExit(f"{item['id']}: no gold phrase found in {case['gold_files']}")


def load(path: Path) -> list[tuple[dict[str, Any], GradeInput]]:
    cases = {c["id"]: c for c in map(json.loads, TEST_QA.read_text(encoding="utf-8").splitlines()) if c}
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        case = cases[item["qa"]]
        answerable = case["type"] != "unanswerable"
        grade_in = GradeInput(
            case["question"],
            case.get("answer", ""),
            answerable,
            item["answer"],
            bool(item.get("refused")),
            evidence(item, case),
        )
        out.append((item, grade_in))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", type=Path, default=ROOT / "benchmarks" / "grader_verdicts.jsonl")
    default_home = Path(llm_judge.os.environ.get("SUNLIB_LLM_BENCH", Path.home() / ".cache" / "sunlib-llm-bench"))
    parser.add_argument("--home", type=Path, default=default_home, help="the bench venv and the model")
    parser.add_argument("--url", help="an OpenAI-compatible server already running (default: start llama.cpp)")
    parser.add_argument("--model", default=llm_judge.MODEL_ALIAS, help="the model name to ask for (with --url)")
    parser.add_argument("--out", type=Path, default=Path("grader-agreement.json"), help="per-item results")
    parser.add_argument("--limit", type=int, help="only the first N items")
    args = parser.parse_args()
    items = load(args.set)[: args.limit]
    server = None
    url = args.url
    if url is None:
        python = llm_judge.runtime(args.home)
        gguf = llm_judge.model(args.home, python)
        port = llm_judge.free_port()
        server = llm_judge.serve(python, gguf, port, args.home / "grader-server.log")
        url = f"http://127.0.0.1:{port}/v1"
    try:
        settings = LLMSettings(base_url=url, model=args.model, timeout_s=900, max_retries=0, stream=False)
        grader = AnswerGrader(OpenAIChatModel(settings))
        results = run(grader, items)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    report(results, args.model)
    args.out.write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")


def run(grader: AnswerGrader, items: list[tuple[dict[str, Any], GradeInput]]) -> list[dict[str, Any]]:
    results = []
    for n, (item, grade_in) in enumerate(items, 1):
        started = time.monotonic()
        grade = grader.grade(grade_in)
        verdict = None if grade.correct is None else ("correct" if grade.correct else "wrong")
        results.append(
            {
                "id": item["id"],
                "kind": item["kind"],
                "expected": item["expected"],
                "verdict": verdict,
                "agrees": verdict == item["expected"],
                "grade": grade.to_json(),
                "wall_s": round(time.monotonic() - started, 1),
            }
        )
        llm_judge.log(f"{n}/{len(items)} {item['id']}: {verdict} (expected {item['expected']}) {grade.reason}")
    return results


def report(results: list[dict[str, Any]], model: str) -> None:
    print(f"grader {model}, rubric {RUBRIC_VERSION}, verdict correct = accuracy >= {PASS_MARK}")
    print(f"{'kind':<24}{'items':>6}{'agree':>7}{'unjudged':>10}")
    kinds = Counter(r["kind"] for r in results)
    for kind in kinds:
        rows = [r for r in results if r["kind"] == kind]
        agree = sum(r["agrees"] for r in rows)
        print(f"{kind:<24}{len(rows):>6}{agree:>7}{sum(r['verdict'] is None for r in rows):>10}")
    total = sum(r["agrees"] for r in results)
    llm = [r for r in results if r["grade"]["method"] == "llm"]
    print(f"{'all':<24}{len(results):>6}{total:>7}{sum(r['verdict'] is None for r in results):>10}")
    print(f"agreement {total / len(results):.1%} overall, {sum(r['agrees'] for r in llm) / max(len(llm), 1):.1%}"
          f" on the {len(llm)} answers the model graded")  # fmt: skip


if __name__ == "__main__":
    main()
