"""The evaluation report: one self-contained HTML page (no network) for a RAG or a retrieval run.

    rag_report_html(EvalRun, baseline: EvalRun | None, run_link: str) -> str
    retrieval_report_html(metrics, per_query, info) -> str

A RAG page shows the headline metrics (with deltas against a baseline), the metrics per
slice (language, question type, answerable or not), the gate score of answerable against
unanswerable questions with the gate threshold drawn in, the latency distribution, the judged
scores when there are any, and a per-question table that filters in the page (a few lines of
vanilla JS) with the answer, the citations, the judged scores, the retrieval-layer figures and
the saved run. With a baseline it lists the questions that got better or worse, both answers
side by side.

The charts are plotly figures; plotly.js (shipped inside the plotly package) is inlined once
per page, so the file opens offline. Every string that comes from the notes, the QA set or a
model is escaped (``html.escape`` in the page, and in chart labels, which plotly would
otherwise read as its own small HTML dialect).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import needs_extra
from .grading import CRITERIA, JUDGED_KEYS
from .qa import EXTRA_KEYS, HIGHER_IS_BETTER, METRIC_KEYS

if TYPE_CHECKING:
    import plotly.graph_objects as go

SLICE_METRICS = ("recall@5", "citation_correctness", "refusal_rate", "false_refusal_rate", "keyword_coverage")
ANSWER_CHARS = 600  # of each answer in the table (the full text is one click away in the run)


@dataclass(frozen=True)
class EvalRun:
    """One ``sunlib eval rag --json`` output: metrics, per-slice metrics, settings, per-question records."""

    metrics: Mapping[str, Any]
    by_slice: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    info: Mapping[str, Any] = field(default_factory=dict)
    cases: Sequence[Mapping[str, Any]] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvalRun:
        metrics = {k: v for k, v in data.items() if k not in ("by_slice", "info", "cases")}
        cases = [c for c in data.get("cases") or [] if isinstance(c, dict) and "id" in c]
        return cls(metrics, dict(data.get("by_slice") or {}), dict(data.get("info") or {}), cases)

    def to_json(self) -> dict[str, Any]:
        return {**self.metrics, "by_slice": self.by_slice, "info": self.info, "cases": list(self.cases)}


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _fmt(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _go() -> Any:
    """plotly's figure module, imported when a page is drawn (it takes most of a second to import,
    which every other command line call would pay)."""
    with needs_extra("eval", "the evaluation report"):
        import plotly.graph_objects

    return plotly.graph_objects


def _figure(fig: go.Figure, title: str) -> str:
    import plotly.io as pio

    fig.update_layout(title=_e(title), height=340, margin={"l": 50, "r": 20, "t": 50, "b": 50}, template="plotly_white")
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, config={"displayModeBar": False})


def page(title: str, body: str) -> str:
    """The whole document: plotly.js inline once, the style, the body, the filter script."""
    from plotly.offline import get_plotlyjs

    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head><body><h1>{_e(title)}</h1>{body}"
        f"<script>{FILTER_JS}</script></body></html>"
    )


# -- headline ---------------------------------------------------------------------------------


def _delta_cell(key: str, now: object, then: object) -> str:
    if not isinstance(now, int | float) or not isinstance(then, int | float):
        return "<td></td>"
    delta = now - then
    higher = HIGHER_IS_BETTER.get(key, True if key in JUDGED_KEYS else None)
    cls = "same" if abs(delta) < 1e-9 or higher is None else ("up" if (delta > 0) == higher else "down")
    return f"<td class='{cls}'>{delta:+.4g}</td>"


def headline(metrics: Mapping[str, Any], baseline: Mapping[str, Any] | None) -> str:
    keys = [*METRIC_KEYS, *EXTRA_KEYS, *(k for k in (*JUDGED_KEYS, "judge_unjudged") if k in metrics)]
    head = "<tr><th>metric</th><th>value</th>" + ("<th>baseline</th><th>delta</th>" if baseline else "") + "</tr>"
    rows = []
    for key in keys:
        cells = f"<td>{_e(key)}</td><td>{_e(_fmt(metrics.get(key)))}</td>"
        if baseline is not None:
            cells += f"<td>{_e(_fmt(baseline.get(key)))}</td>" + _delta_cell(key, metrics.get(key), baseline.get(key))
        rows.append(f"<tr>{cells}</tr>")
    return f"<section><h2>Headline metrics</h2><table class='metrics'>{head}{''.join(rows)}</table></section>"


def _settings(info: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in info.items() if v is not None and not isinstance(v, dict | list)}
    grader = info.get("grader")
    if isinstance(grader, dict):
        shown["judge model"] = grader.get("model")
        shown["rubric"] = grader.get("rubric")
    items = "".join(f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in shown.items())
    return f"<section><h2>Settings</h2><ul class='info'>{items}</ul></section>"


# -- charts -----------------------------------------------------------------------------------


def slice_chart(by_slice: Mapping[str, Mapping[str, Any]]) -> str:
    plot = _go()
    names = sorted(by_slice)
    fig = plot.Figure()
    for key in SLICE_METRICS:
        ys = [by_slice[n].get(key) for n in names]
        fig.add_trace(plot.Bar(name=_e(key), x=[_e(n) for n in names], y=ys))
    fig.update_layout(barmode="group", yaxis={"range": [0, 1.05]})
    fig.update_layout(legend={"orientation": "h", "y": -0.35})
    charts = "<div class='wide'>" + _figure(fig, "Metrics per slice") + "</div>"
    if any("judge_accuracy" in by_slice[n] for n in names):
        judged = plot.Figure()
        for key in CRITERIA:
            judged.add_trace(
                plot.Bar(name=_e(key), x=[_e(n) for n in names], y=[by_slice[n].get(f"judge_{key}") for n in names])
            )
        judged.update_layout(barmode="group", yaxis={"range": [0, 5.2]})
        judged.update_layout(legend={"orientation": "h", "y": -0.35})
        charts += "<div class='wide'>" + _figure(judged, "Judged scores per slice (mean, 1-5)") + "</div>"
    return charts


def gate_chart(cases: Sequence[Mapping[str, Any]], threshold: float | None) -> str:
    plot = _go()
    fig = plot.Figure()
    for label, want in (("answerable", True), ("unanswerable", False)):
        scores = [c["gate"]["gate_score"] for c in cases if c.get("answerable") is want and c.get("gate")]
        fig.add_trace(plot.Histogram(name=label, x=scores, opacity=0.65, nbinsx=20))
    fig.update_layout(barmode="overlay", xaxis_title="gate score", yaxis_title="questions")
    if threshold is not None:
        fig.add_vline(x=threshold, line_dash="dash", line_color="#b00", annotation_text=f"threshold {threshold}")
    return _figure(fig, "Gate score: answerable against unanswerable questions")


def latency_chart(latencies: Sequence[float], title: str = "Latency per question (ms)") -> str:
    """One point per question on a log axis (a first question that loads the models can be 30x the rest)."""
    plot = _go()
    fig = plot.Figure(plot.Box(x=list(latencies), boxpoints="all", jitter=0.5, name="latency", orientation="h"))
    fig.update_layout(xaxis={"title": "ms (log scale)", "type": "log"}, showlegend=False)
    return _figure(fig, title)


def retrieval_layer_chart(cases: Sequence[Mapping[str, Any]]) -> str:
    """The rerank scores at ranks 1-5 (as the trace's Reranking step records them), per group."""
    plot = _go()
    fig = plot.Figure()
    for label, want in (("answerable", True), ("unanswerable", False)):
        xs, ys = [], []
        for c in cases:
            if c.get("answerable") is want:
                for rank, score in enumerate((c.get("rerank_scores") or [])[:5], 1):
                    xs.append(rank)
                    ys.append(score)
        fig.add_trace(plot.Box(name=label, x=xs, y=ys))
    fig.update_layout(boxmode="group", xaxis_title="rank", yaxis_title="rerank score")
    return _figure(fig, "Rerank score by rank")


def judged_chart(cases: Sequence[Mapping[str, Any]]) -> str:
    plot = _go()
    grades = [c["grade"] for c in cases if c.get("grade") and c["grade"].get("accuracy") is not None]
    if not grades:
        return ""
    fig = plot.Figure()
    for key in CRITERIA:
        counts = [sum(1 for g in grades if g[key] == s) for s in range(1, 6)]
        fig.add_trace(plot.Bar(name=key, x=[1, 2, 3, 4, 5], y=counts))
    fig.update_layout(barmode="group", xaxis_title="score", yaxis_title="answers")
    return _figure(fig, "Judged score distribution")


# -- the per-question table -------------------------------------------------------------------


def _grade_cell(grade: Mapping[str, Any] | None) -> str:
    if not grade:
        return "<td class='muted'>not judged</td>"
    if grade.get("accuracy") is None:
        return f"<td class='down'>unjudged: {_e(grade.get('failure'))}</td>"
    scores = " / ".join(str(grade[k]) for k in CRITERIA)
    how = " (refusal)" if grade.get("method") == "refusal" else ""
    reason = _e(grade.get("reason"))
    return f"<td title='relevance / completeness / accuracy'>{scores}{how}<br><small>{reason}</small></td>"


def _run_cell(case: Mapping[str, Any], run_link: str) -> str:
    run_id = case.get("run_id")
    if not run_id or not case.get("run_saved"):
        return "<td class='muted'>not saved</td>"
    href = f"{run_link}/api/runs/{run_id}"
    return f"<td><a href='{_e(href)}'>{_e(run_id)}</a><br><code>sunlib runs show {_e(run_id)}</code></td>"


def _outcome(case: Mapping[str, Any]) -> str:
    return "refused" if case.get("refused") else "answered"


def question_row(case: Mapping[str, Any], run_link: str) -> str:
    gate = case.get("gate") or {}
    cites = "".join(f"<li>{_e(c.get('path'))}</li>" for c in case.get("citation_list") or [])
    answer = str(case.get("answer") or "")
    short = answer if len(answer) <= ANSWER_CHARS else answer[:ANSWER_CHARS] + "…"
    ok = "ok" if case.get("answerable") != case.get("refused") else "wrong"
    attrs = (
        f"data-lang='{_e(case.get('lang'))}' data-type='{_e(case.get('type'))}'"
        f" data-answerable='{'yes' if case.get('answerable') else 'no'}' data-outcome='{_outcome(case)}'"
    )
    figures = (
        f"gate {_fmt(gate.get('gate_score'))} / {_fmt(gate.get('threshold'))}<br>"
        f"rerank top {_fmt((case.get('rerank_scores') or [None])[0])}<br>"
        f"{case.get('context_chunks', 0)} chunks, {case.get('context_chars', 0)} chars"
    )
    return (
        f"<tr {attrs}><td>{_e(case.get('id'))}</td><td>{_e(case.get('lang'))}</td><td>{_e(case.get('type'))}</td>"
        f"<td>{_e(case.get('question'))}</td><td class='{ok}'>{_outcome(case)}"
        f"{'<br><small>' + _e(case.get('refusal_reason')) + '</small>' if case.get('refused') else ''}</td>"
        f"<td class='answer'>{_e(short)}</td><td><ul>{cites}</ul></td>{_grade_cell(case.get('grade'))}"
        f"<td><small>{figures}</small></td><td>{_fmt(case.get('latency_ms'))}</td>{_run_cell(case, run_link)}</tr>"
    )


def question_table(cases: Sequence[Mapping[str, Any]], run_link: str) -> str:
    def options(key: str) -> str:
        values = sorted({str(c.get(key)) for c in cases})
        return "<option value=''>all</option>" + "".join(f"<option>{_e(v)}</option>" for v in values)

    controls = (
        "<div class='filters'><label>search <input id='f-text' type='search'></label>"
        f"<label>language <select id='f-lang'>{options('lang')}</select></label>"
        f"<label>type <select id='f-type'>{options('type')}</select></label>"
        "<label>answerable <select id='f-answerable'><option value=''>all</option><option>yes</option>"
        "<option>no</option></select></label>"
        "<label>outcome <select id='f-outcome'><option value=''>all</option><option>answered</option>"
        "<option>refused</option></select></label> <span id='f-count'></span></div>"
    )
    head = (
        "<tr><th>id</th><th>lang</th><th>type</th><th>question</th><th>outcome</th><th>answer</th>"
        "<th>citations</th><th>judged R/C/A</th><th>retrieval</th><th>ms</th><th>run</th></tr>"
    )
    rows = "".join(question_row(c, run_link) for c in cases)
    return (
        f"<section><h2>Questions</h2>{controls}<div class='scroll'><table id='questions' class='questions'>"
        f"<thead>{head}</thead><tbody>{rows}</tbody></table></div></section>"
    )


# -- against a baseline -----------------------------------------------------------------------


def case_score(case: Mapping[str, Any]) -> float:
    """One number per question to tell better from worse: the judged accuracy when there is one,
    else the deterministic outcome (a right refusal decision, the gold file found, a gold phrase cited)."""
    grade = case.get("grade") or {}
    if grade.get("accuracy") is not None:
        return float(grade["accuracy"])
    if not case.get("answerable"):
        return 1.0 if case.get("refused") else 0.0
    if case.get("refused"):
        return 0.0
    return (float(bool(case.get("gold_in_selected"))) + float(bool(case.get("citation_correct")))) / 2 + 0.01


def changes(current: EvalRun, baseline: EvalRun) -> tuple[list[tuple[Mapping[str, Any], Mapping[str, Any]]], ...]:
    """(better, worse): pairs (now, then) of the questions in both runs whose score moved."""
    then = {str(c["id"]): c for c in baseline.cases}
    better, worse = [], []
    for now in current.cases:
        old = then.get(str(now["id"]))
        if old is None:
            continue
        delta = case_score(now) - case_score(old)
        if delta > 1e-9:
            better.append((now, old))
        elif delta < -1e-9:
            worse.append((now, old))
    return better, worse


def _side(case: Mapping[str, Any], label: str) -> str:
    grade = case.get("grade") or {}
    scores = " / ".join(str(grade.get(k)) for k in CRITERIA) if grade.get("accuracy") is not None else "not judged"
    cites = ", ".join(str(c.get("path")) for c in case.get("citation_list") or []) or "none"
    return (
        f"<div class='side'><h4>{_e(label)}: {_outcome(case)}</h4><p class='answer'>{_e(case.get('answer'))}</p>"
        f"<p><small>citations: {_e(cites)}<br>judged R/C/A: {_e(scores)}</small></p></div>"
    )


def changed_section(title: str, pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], cls: str) -> str:
    if not pairs:
        return f"<section><h2>{_e(title)}</h2><p class='muted'>none</p></section>"
    items = "".join(
        f"<div class='change {cls}'><h3>{_e(now.get('id'))}: {_e(now.get('question'))}</h3>"
        f"<div class='pair'>{_side(old, 'baseline')}{_side(now, 'this run')}</div></div>"
        for now, old in pairs
    )
    return f"<section><h2>{_e(title)} ({len(pairs)})</h2>{items}</section>"


def rag_report_html(run: EvalRun, baseline: EvalRun | None = None, run_link: str = "", title: str = "") -> str:
    """The RAG evaluation page; ``run_link`` is the server the run links point at ("" for relative)."""
    body = [headline(run.metrics, baseline.metrics if baseline else None), _settings(run.info)]
    if baseline is not None:
        better, worse = changes(run, baseline)
        body += [changed_section("Got worse", worse, "down"), changed_section("Got better", better, "up")]
    threshold = run.info.get("gate_threshold")
    charts = [
        slice_chart(run.by_slice),
        gate_chart(run.cases, threshold if isinstance(threshold, int | float) else None),
        retrieval_layer_chart(run.cases),
        latency_chart([float(c.get("latency_ms") or 0.0) for c in run.cases]),
        judged_chart(run.cases),
    ]
    body.append(f"<section><h2>Charts</h2><div class='charts'>{''.join(charts)}</div></section>")
    body.append(question_table(run.cases, run_link))
    return page(title or "sunlib RAG evaluation", "".join(body))


def retrieval_report_html(
    metrics: Mapping[str, Any], per_query: Mapping[str, Mapping[str, Any]], info: Mapping[str, Any]
) -> str:
    """The retrieval evaluation page: metrics, per-query nDCG and latency distributions, a per-query table."""
    plot = _go()
    rows = "".join(f"<tr><td>{_e(k)}</td><td>{_e(_fmt(v))}</td></tr>" for k, v in metrics.items())
    body = [f"<section><h2>Headline metrics</h2><table class='metrics'>{rows}</table></section>", _settings(info)]
    ndcg = plot.Figure(plot.Histogram(x=[q["ndcg@10"] for q in per_query.values()], nbinsx=20, name="nDCG@10"))
    ndcg.update_layout(xaxis_title="nDCG@10", yaxis_title="queries")
    latencies = [float(q["latency_ms"]) for q in per_query.values() if q.get("latency_ms") is not None]
    charts = _figure(ndcg, "nDCG@10 per query") + latency_chart(latencies, "Latency per query (ms)")
    body.append(f"<section><h2>Charts</h2><div class='charts'>{charts}</div></section>")
    head = "<tr><th>query</th><th>nDCG@10</th><th>recall@10</th><th>MRR@10</th><th>ms</th><th>top documents</th></tr>"
    table = "".join(
        f"<tr><td>{_e(qid)}</td><td>{_fmt(q.get('ndcg@10'))}</td><td>{_fmt(q.get('recall@10'))}</td>"
        f"<td>{_fmt(q.get('mrr@10'))}</td><td>{_fmt(q.get('latency_ms'))}</td>"
        f"<td><small>{_e(', '.join(str(d) for d in q.get('top', [])[:5]))}</small></td></tr>"
        for qid, q in per_query.items()
    )
    body.append(
        "<section><h2>Queries</h2><div class='filters'><label>search <input id='f-text' type='search'></label>"
        f" <span id='f-count'></span></div><table id='questions'><thead>{head}</thead><tbody>{table}</tbody>"
        "</table></section>"
    )
    return page("sunlib retrieval evaluation", "".join(body))


CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem auto;max-width:1400px;padding:0 1rem;color:#222}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%}
th,td{border:1px solid #ddd;padding:4px 6px;vertical-align:top;text-align:left}
table.metrics{width:auto}th{background:#f4f4f4}.muted{color:#888}.up{color:#1a7f37}.down{color:#b00020}
.wrong{color:#b00020;font-weight:600}.ok{color:#1a7f37}.answer{white-space:pre-wrap;max-width:36rem}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:1rem}.wide{grid-column:1/-1}
.scroll{overflow-x:auto}td code{font-size:.8em;white-space:nowrap}
.filters{margin:.5rem 0;display:flex;gap:1rem;flex-wrap:wrap}.info{columns:2}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1rem}.side{border:1px solid #ddd;padding:.5rem}
.change.up h3{color:#1a7f37}.change.down h3{color:#b00020}td ul{margin:0;padding-left:1rem}
"""

FILTER_JS = """
(function(){
  const table=document.getElementById('questions'); if(!table) return;
  const ids=['f-text','f-lang','f-type','f-answerable','f-outcome'];
  const get=id=>{const e=document.getElementById(id);return e?e.value.trim().toLowerCase():'';};
  function apply(){
    const text=get('f-text'), want={lang:get('f-lang'),type:get('f-type'),
      answerable:get('f-answerable'),outcome:get('f-outcome')};
    let shown=0;
    for(const row of table.tBodies[0].rows){
      let ok=!text||row.textContent.toLowerCase().includes(text);
      for(const [k,v] of Object.entries(want)){ if(v&&(row.dataset[k]||'').toLowerCase()!==v) ok=false; }
      row.hidden=!ok; if(ok) shown++;
    }
    const c=document.getElementById('f-count'); if(c) c.textContent=shown+' of '+table.tBodies[0].rows.length+' shown';
  }
  for(const id of ids){
    const e=document.getElementById(id);
    if(e){e.addEventListener('input',apply);e.addEventListener('change',apply);}
  }
  apply();
})();
"""
