"""``sunlib eval retrieval|rag|calibrate|check``: retrieval metrics, answer metrics, refusal-gate calibration, and the
check of a QA set against its vault."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..config import load_settings, merge
from ..errors import UserError
from ..evaluate import check_qa, evaluate_rag, evaluate_retrieval, load_beir, load_qa, regressions
from ..evaluate.calibrate import calibrate_gate
from ..evaluate.grading import JUDGED_KEYS, AnswerGrader, create_grader, judged_regressions
from ..evaluate.history import compare, eval_history, load_eval, save_eval
from ..evaluate.qa import EXTRA_KEYS as QA_EXTRA_KEYS
from ..evaluate.qa import METRIC_KEYS as QA_KEYS
from ..evaluate.report import EvalRun, rag_report_html, retrieval_report_html
from ..library import Library
from .app import app
from .common import VAULT_HELP, err, open_library, out, principals_of, print_json, require_index
from .progress import ProgressBars

eval_app = typer.Typer(help="Measure retrieval and answers on labelled data.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")

METRIC_KEYS = ("ndcg@10", "recall@10", "recall@100", "mrr@10", "latency_ms_p50", "latency_ms_p95")


@eval_app.command("retrieval")
def retrieval(
    dataset: Annotated[Path, typer.Argument(help="folder with corpus.jsonl, queries.jsonl, qrels/<split>.tsv")],
    mode: Annotated[str, typer.Option("--mode", "-m", help="bm25, dense or hybrid")] = "hybrid",
    split: Annotated[str, typer.Option(help="qrels split: test, train, trial, ...")] = "test",
    provider: Annotated[str | None, typer.Option(help="embedding provider")] = None,
    fusion: Annotated[str | None, typer.Option(help="rrf, zscore or minmax")] = None,
    bm25_weight: Annotated[float | None, typer.Option(help="fusion weight of the BM25 route")] = None,
    dense_weight: Annotated[float | None, typer.Option(help="fusion weight of the dense route")] = None,
    chunker: Annotated[str | None, typer.Option(help="structure or fixed")] = None,
    threads: Annotated[int | None, typer.Option(help="model threads")] = None,
    limit_queries: Annotated[int | None, typer.Option(help="evaluate only the first N judged queries")] = None,
    rerank: Annotated[
        str | None, typer.Option(help="rerank the fused hits first: lexical, fusion or cross-encoder")
    ] = None,
    rescore_provider: Annotated[
        str | None, typer.Option(help="second embedder of the fusion reranker (minilm, use)")
    ] = None,
    rescore_weight: Annotated[float | None, typer.Option(help="weight of the second cosine in fusion")] = None,
    as_is: Annotated[
        bool,
        typer.Option(
            "--as-is", help="embed nothing: search the cached index with the vectors it has (some may be missing)"
        ),
    ] = False,
    fast_only: Annotated[
        bool,
        typer.Option("--fast-only", help="embed the fast tier only: search as it is before the provider's vectors"),
    ] = False,
    fill_missing: Annotated[
        bool | None,
        typer.Option(
            "--fill-missing/--no-fill-missing",
            help="hybrid: fill in the dense part of chunks without a vector yet (default: on)",
        ),
    ] = None,
    report: Annotated[
        Path | None, typer.Option(help="write the report here: HTML for *.html, else JSON (settings, per-query)")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object with the metrics")] = False,
) -> None:
    """nDCG@10, recall@10/100, MRR@10 and query latency for one retrieval mode."""
    settings = merge(
        load_settings(None, config),
        embedding={"provider": provider, "threads": threads},
        index={"chunker": chunker},
        search={
            "fusion": fusion,
            "bm25_weight": bm25_weight,
            "dense_weight": dense_weight,
            "fill_missing": fill_missing,
        },
        answer={"rescore_provider": rescore_provider, "rescore_weight": rescore_weight},
    )
    data = load_beir(dataset, split)
    with ProgressBars(enabled=not as_json) as bars:
        result = evaluate_retrieval(
            data,
            settings,
            mode,
            progress=bars,
            on_query=lambda n, t: bars("queries", n, t),
            limit_queries=limit_queries,
            rerank=rerank,
            as_is=as_is,
            fast_only=fast_only,
        )
    if report is not None and report.suffix.lower() in (".html", ".htm"):
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(retrieval_report_html(result.metrics, result.per_query, result.info), encoding="utf-8")
    elif report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(
            json.dumps(
                {"metrics": result.metrics, "info": result.info, "per_query": result.per_query},
                ensure_ascii=False,
                indent=1,
            ),
            encoding="utf-8",
        )
    info = result.info
    if as_json:
        extra = {k: info[k] for k in ("vectors_pending", "filled_in_per_query")} if as_is or fast_only else {}
        print_json({**{k: result.metrics[k] for k in METRIC_KEYS}, **extra})
        return
    out.print(f"{info['dataset']} [{info['split']}] mode={mode} queries={info['queries']} docs={info['documents']}")
    if info.get("embedding"):
        out.print(f"embedding {info['embedding']}" + (f"  fusion {info['fusion']}" if info.get("fusion") else ""))
    if info.get("vectors_pending"):
        out.print(
            f"{info['vectors_pending']} of {info['chunks']} chunks have no vector yet"
            + (f"; {info['filled_in_per_query']} hits per query filled in" if mode == "hybrid" else "")
        )
    if info.get("rerank"):
        out.print(
            f"rerank {info['rerank']}" + (f" with {info['rescore_provider']}" if info.get("rescore_provider") else "")
        )
    for key in METRIC_KEYS:
        out.print(f"  {key:<15} {result.metrics[key]}")
    if report is not None:
        err.print(f"full report: {report}")


def _qa_library(
    vault: Path, config: Path | None, writer: str | None, provider: str | None, mode: str | None
) -> Library:
    return Library.open(vault, config).with_settings(
        answer={"writer": writer}, embedding={"provider": provider}, search={"mode": mode}
    )


@eval_app.command("rag")
def rag(
    qa: Annotated[Path, typer.Argument(help="QA set (JSONL): id, lang, type, question, gold_files, gold_phrases")],
    vault: Annotated[Path, typer.Option("--vault", "-V", help="the vault the QA set is about (indexed if needed)")],
    writer: Annotated[str | None, typer.Option(help="extractive, openai or llama-cpp")] = None,
    provider: Annotated[str | None, typer.Option(help="embedding provider")] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            "-m",
            help="single, agentic or both (both modes in one run, side by side; default: [answer] mode);"
            " bm25, dense or hybrid still set the search mode",
        ),
    ] = None,
    search_mode: Annotated[str | None, typer.Option(help="bm25, dense or hybrid")] = None,
    baseline: Annotated[Path | None, typer.Option(help="a previous --json output: fail on a regression")] = None,
    tolerance: Annotated[float, typer.Option(help="allowed absolute drop per metric against --baseline")] = 0.05,
    judge: Annotated[
        bool,
        typer.Option("--judge", help="an LLM ([llm]) scores each answer 1-5: relevance, completeness, accuracy"),
    ] = False,
    judge_model: Annotated[str | None, typer.Option(help="the judge's model (default: [llm] model)")] = None,
    judge_url: Annotated[str | None, typer.Option(help="the judge's OpenAI-compatible URL (default: [llm])")] = None,
    judge_tolerance: Annotated[
        float, typer.Option(help="allowed relative drop of a judged score against --baseline (0.05: 5%)")
    ] = 0.05,
    report: Annotated[
        Path | None, typer.Option(help="write the report here: an HTML page for *.html, else the full JSON")
    ] = None,
    save: Annotated[bool, typer.Option(help="keep the evaluation in the index (`sunlib eval history`)")] = True,
    save_runs: Annotated[
        bool | None,
        typer.Option(
            "--save-runs/--no-save-runs",
            help="save each question's run, for the report's links (default: with --report)",
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object: metrics, by_slice, info and the per-question cases")
    ] = False,
) -> None:
    """Recall@5, citation correctness, refusal and false-refusal rates, unsupported claims, keyword coverage,
    the multi-document figures (all_gold_recall@10, part_coverage, rounds); with --judge, judged scores beside
    them. --mode both asks every question in both modes on the same index and prints them side by side.

    The QA set is JSONL, one question per line: {"id": "q1", "lang": "en" | "zh", "type": TYPE,
    "question": "...", "gold_files": ["path/in/vault.md"], "gold_phrases": ["verbatim value"],
    "answer": "reference answer"}. TYPE is one of: fact, procedure, comparison, enumeration, cross_doc,
    multi_part, follow_up, code_identifier, paraphrase, unanswerable; an unanswerable question has no
    gold_files. Optional keys: parts,
    gold_groups, follows (multi-document sets; README "QA sets")."""
    answer_modes, search_mode = _modes(mode, search_mode)
    cases = load_qa(qa)
    base = _read_baseline(baseline) if baseline else None
    keep_runs = report is not None if save_runs is None else save_runs  # a run write per question otherwise
    runs: dict[str, EvalRun] = {}
    ids: dict[str, str | None] = {}
    with _qa_library(vault, config, writer, provider, search_mode) as lib, ProgressBars(enabled=not as_json) as bars:
        grader = _grader(lib, judge_model, judge_url) if judge else None
        lib.index(progress=bars)
        for name, agentic in answer_modes:
            progress = lambda n, t, name=name: bars(f"questions ({name})", n, t)  # noqa: E731
            result = evaluate_rag(lib, cases, on_case=progress, grader=grader, save_runs=keep_runs, agentic=agentic)
            run = EvalRun(result.metrics, result.by_slice, result.info, result.cases)
            runs[name] = run
            label = qa.name if agentic is None else f"{qa.name} [{name}]"
            ids[name] = save_eval(lib.store, run, label, lib.settings.search.principals) if save else None
        link = f"http://{lib.settings.server.host}:{lib.settings.server.port}"
    if report is not None:
        for name, run in runs.items():
            path = report if len(runs) == 1 else report.with_name(f"{report.stem}.{name}{report.suffix}")
            _write_rag_report(path, run, EvalRun.from_json(base) if base is not None else None, link)
            err.print(f"report: {path}")
    _print_rag(qa.name, len(cases), runs, as_json)
    for eval_id in ids.values():
        if eval_id is not None:
            err.print(f"saved as {eval_id} (sunlib eval history; sunlib eval compare {eval_id} OTHER)")
    if base is not None:
        worse = []
        for name, run in runs.items():
            metrics = dict(run.metrics)
            lines = regressions(metrics, base, tolerance) + judged_regressions(metrics, base, judge_tolerance)
            worse += [f"{name}: {line}" if len(runs) > 1 else line for line in lines]
        for line in worse:
            err.print(f"regression: {line}")
        if worse:
            raise typer.Exit(1)


ANSWER_MODES: dict[str, tuple[tuple[str, bool | None], ...]] = {
    "single": (("single", False),),
    "agentic": (("agentic", True),),
    "both": (("single", False), ("agentic", True)),
}
SEARCH_MODES = ("bm25", "dense", "hybrid")


def _modes(mode: str | None, search_mode: str | None) -> tuple[tuple[tuple[str, bool | None], ...], str | None]:
    """``--mode`` names the answer mode (single, agentic, both) or, as it did before, the search mode."""
    if search_mode is not None and search_mode not in SEARCH_MODES:
        raise UserError(f"unknown --search-mode {search_mode!r}; choose one of: {', '.join(SEARCH_MODES)}")
    if mode is None:
        return (("config", None),), search_mode
    if mode in SEARCH_MODES:
        if search_mode is not None and search_mode != mode:
            raise UserError(f"--mode {mode} and --search-mode {search_mode} disagree")
        return (("config", None),), mode
    if mode not in ANSWER_MODES:
        choices = ", ".join([*ANSWER_MODES, *SEARCH_MODES])
        raise UserError(f"unknown --mode {mode!r}; choose one of: {choices}")
    return ANSWER_MODES[mode], search_mode


def _print_rag(name: str, questions: int, runs: dict[str, EvalRun], as_json: bool) -> None:
    if as_json:
        if len(runs) == 1:
            print_json(next(iter(runs.values())).to_json())
        else:
            print_json({mode: run.to_json() for mode, run in runs.items()})
        return
    first = next(iter(runs.values()))
    keys = [*QA_KEYS, *QA_EXTRA_KEYS, *(k for k in (*JUDGED_KEYS, "judge_unjudged") if k in first.metrics)]
    info = first.info
    if len(runs) > 1:
        out.print(f"{name}: {questions} questions, writer {info['writer']}, search mode {info['mode']}, same index")
        out.print(f"  {'':<24} " + "".join(f"{mode:>12}" for mode in runs) + f"{'delta':>12}")
        for key in keys:
            values = [run.metrics.get(key) for run in runs.values()]
            a, b = values[0], values[-1]
            delta = f"{b - a:+.4g}" if isinstance(a, int | float) and isinstance(b, int | float) else ""
            out.print(f"  {key:<24} " + "".join(f"{v!s:>12}" for v in values) + f"{delta:>12}")
        return
    mode = "" if "config" in runs else f", answer mode {info.get('answer_mode')}"
    out.print(f"{name}: {questions} questions, writer {info['writer']}, mode {info['mode']}{mode}")
    for key in keys:
        out.print(f"  {key:<24} {first.metrics.get(key)}")
    for slice_name, m in sorted(first.by_slice.items()):
        out.print(
            f"  [dim]{slice_name:<22} n={m['questions']:<3} recall@5={m['recall@5']} refusal={m['refusal_rate']}"
            f" false_refusal={m['false_refusal_rate']} citation={m['citation_correctness']}[/]"
        )
    if info.get("grader"):
        g = info["grader"]
        out.print(f"  judged by {g['model']} with rubric {g['rubric']}; a refusal is scored without the model")


@eval_app.command("check")
def check(
    qa: Annotated[Path, typer.Argument(help="QA set (JSONL), in the format `sunlib eval rag --help` describes")],
    vault: Annotated[Path, typer.Option("--vault", "-V", help="the vault its gold files are in (not indexed)")],
) -> None:
    """Check a QA set against its vault without running it: every line loads as `eval rag` reads it, fields and
    their values are known, lang agrees with the question's script, every gold file exists in the vault and every
    gold phrase is a verbatim substring of one of its gold files (and each gold file holds one), parts name gold
    files that hold their phrases, and follow-ups follow. Prints one OK line with the set's counts, or each problem
    as a line (FILE:LINE: what) and exits 1."""
    result = check_qa(qa, vault)
    for line in result.problems:
        print(line)
    if not result.ok:
        raise typer.Exit(1)
    print(result.summary())


@eval_app.command("calibrate")
def calibrate(
    qa: Annotated[Path, typer.Argument(help="a labelled QA set with answerable and unanswerable questions")],
    vault: Annotated[Path, typer.Option("--vault", "-V", help="the vault whose index stores the threshold")],
    provider: Annotated[str | None, typer.Option(help="embedding provider")] = None,
    mode: Annotated[str | None, typer.Option("--mode", "-m", help="bm25, dense or hybrid")] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the calibration as JSON")] = False,
) -> None:
    """Fit the refusal gate (threshold and cosine weight) and store it in the index for the active space."""
    cases = load_qa(qa)
    with _qa_library(vault, config, None, provider, mode) as lib, ProgressBars(enabled=not as_json) as bars:
        lib.index(progress=bars)
        result = calibrate_gate(lib, cases, on_case=lambda n, t: bars("questions", n, t))
    if as_json:
        print_json(result)
        return
    out.print(
        f"stored {result['key']}: threshold {result['threshold']} with cosine weight {result['cosine_weight']}"
        f" ({result['questions']} questions)"
    )
    out.print(
        f"  on this set: refusal rate {result['refusal_rate']}, false refusals {result['false_refusal_rate']},"
        f" balanced accuracy {result['balanced_accuracy']}"
    )
    for lang, fit in result["languages"].items():
        out.print(
            f"  {lang} questions ({fit['questions']}): threshold {fit['threshold']} with cosine weight"
            f" {fit['cosine_weight']}; refusal rate {fit['refusal_rate']}, false refusals {fit['false_refusal_rate']}"
        )
    checks = result["refused_by_checks"]
    out.print(
        f"  refused by the name and answer-type checks: {checks['unanswerable']} unanswerable,"
        f" {checks['answerable']} answerable"
    )
    for name, scores in result["distributions"].items():
        out.print(f"  {name:<13} gate scores: {', '.join(f'{s:.3f}' for s in scores)}")


def _grader(lib: Library, model: str | None, url: str | None) -> AnswerGrader:
    update = {k: v for k, v in (("model", model), ("base_url", url)) if v}
    return create_grader(lib.settings.answer.judge_provider, lib.settings.llm.model_copy(update=update))


def _write_rag_report(path: Path, run: EvalRun, baseline: EvalRun | None, link: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() in (".html", ".htm"):
        path.write_text(rag_report_html(run, baseline, link), encoding="utf-8")
    else:
        path.write_text(json.dumps(run.to_json(), ensure_ascii=False, indent=1), encoding="utf-8")


def _read_baseline(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read baseline {path}: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"baseline {path} is not a JSON object of metrics")
    return data


@eval_app.command("history")
def history(
    limit: Annotated[int, typer.Option("--limit", "-n", help="how many, newest first")] = 20,
    as_: Annotated[list[str] | None, typer.Option("--as", help="list as these ACL principals (besides public)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
) -> None:
    """Saved evaluations you may read (those run as principals you also hold, by any owner), newest first."""
    if not 1 <= limit <= 10_000:
        raise UserError("--limit must be 1..10000")
    with open_library(vault, config) as lib:
        require_index(lib)
        principals = principals_of(as_) or lib.settings.search.principals
        found = eval_history(lib.store, principals, limit, owner=None)  # every owner's, as `sunlib runs` lists
        runs = [(r, load_eval(lib.store, r.run_id, principals, owner=None)) for r in found]
    rows = [
        {"eval_id": r.run_id, "created_at": r.created_at, "qa_set": r.question, **_brief(e)}
        for r, e in runs
        if e is not None
    ]
    if as_json:
        print_json(rows)
        return
    if not rows:
        out.print("no saved evaluations")
    for row in rows:
        when = datetime.fromtimestamp(float(str(row["created_at"])), UTC).strftime("%Y-%m-%d %H:%M:%S")
        figures = "  ".join(f"{k}={row[k]}" for k in ("questions", "recall@5", "refusal_rate", "judge_accuracy"))
        out.print(f"{row['eval_id']}  {when}  {escape(str(row['qa_set']))}  {figures}")


def _brief(run: EvalRun | None) -> dict[str, object]:
    m = run.metrics if run is not None else {}
    grader = (run.info.get("grader") if run is not None else None) or {}
    return {
        "questions": m.get("questions"),
        "recall@5": m.get("recall@5"),
        "refusal_rate": m.get("refusal_rate"),
        "false_refusal_rate": m.get("false_refusal_rate"),
        "judge_accuracy": m.get("judge_accuracy"),
        "judge_model": grader.get("model"),
    }


@eval_app.command("compare")
def compare_cmd(
    then: Annotated[str, typer.Argument(help="the earlier evaluation's id (`sunlib eval history`)")],
    now: Annotated[str, typer.Argument(help="the later evaluation's id")],
    report: Annotated[Path | None, typer.Option(help="write an HTML page: deltas, both answers side by side")] = None,
    as_: Annotated[list[str] | None, typer.Option("--as", help="read as these ACL principals (besides public)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    vault: Annotated[Path | None, typer.Option("--vault", "-V", help=VAULT_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="a sunlib.toml to use")] = None,
) -> None:
    """What changed between two saved evaluations: metric deltas and the questions that got better or worse."""
    with open_library(vault, config) as lib:
        require_index(lib)
        principals = principals_of(as_) or lib.settings.search.principals
        a, b = (load_eval(lib.store, i, principals, owner=None) for i in (then, now))
        link = f"http://{lib.settings.server.host}:{lib.settings.server.port}"
    for run_id, run in ((then, a), (now, b)):
        if run is None:
            raise UserError(f"no evaluation {run_id!r} that you may read (see `sunlib eval history`)")
    assert a is not None and b is not None
    diff = compare(a, b)
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(rag_report_html(b, a, link, f"sunlib evaluation {now} against {then}"), encoding="utf-8")
    if as_json:
        deltas = {k: {"then": t, "now": n, "delta": d} for k, (t, n, d) in diff.deltas.items()}
        print_json({"then": then, "now": now, "deltas": deltas, "better": diff.better, "worse": diff.worse})
        return
    out.print(f"{now} against {then}")
    for key, (t, n, d) in diff.deltas.items():
        out.print(f"  {key:<24} {t} -> {n} ({d:+})")
    out.print(f"  better: {', '.join(diff.better) or 'none'}")
    out.print(f"  worse:  {', '.join(diff.worse) or 'none'}")
    if report is not None:
        err.print(f"report: {report}")
