/* sunlib web UI, the Evaluate page: run a QA set with the benchmark API, watch its progress
 * (server-sent events), open the HTML report, compare two saved evaluations.
 *
 * Built on the helpers app.js exposes as window.sunlibUI. The same safety rule holds: strings from
 * the server go into the page as text (el()), never as HTML. The report, a whole HTML page made by
 * the server with every note-derived string escaped, is shown in an iframe sandboxed without our
 * origin (allow-scripts only: its charts and table filter run, but it cannot reach the app or the API).
 */
(() => {
  "use strict";

  const ui = window.sunlibUI;
  if (!ui) return;
  const { $, el, clear, api, headers, failure, readSSE, fmtNum, fmtTime, loaders } = ui;

  const status = $("#eval-status");
  const bar = $("#eval-progress");
  let running = false;

  const metric = (m, key) => (typeof m[key] === "number" ? fmtNum(m[key]) : "—");

  async function loadQASets() {
    const select = $("#eval-qa");
    const previous = select.value;
    const { qa_sets: sets } = await api("/api/evals/qa-sets");
    clear(select).append(...sets.map((name) => el("option", { text: name, attrs: { value: name } })));
    if (sets.includes(previous)) select.value = previous;
  }

  function evalRow(e) {
    const pick = (name) =>
      el("input", {
        attrs: { type: "radio", name, value: e.eval_id, "aria-label": `${name}: ${e.eval_id}` },
        on: { change: updateCompare },
      });
    return el(
      "tr",
      { attrs: { "data-eval": e.eval_id } },
      el("td", {}, pick("eval-then")),
      el("td", {}, pick("eval-now")),
      el("td", {}, el("code", { text: e.eval_id })),
      el("td", { text: e.qa_set }),
      el("td", { text: fmtTime(e.created_at) }),
      el("td", { text: e.questions ?? "—" }),
      el("td", { text: metric(e.metrics, "recall@5") }),
      el("td", { text: metric(e.metrics, "refusal_rate") }),
      el("td", { text: metric(e.metrics, "false_refusal_rate") }),
      el("td", { text: metric(e.metrics, "judge_accuracy") }),
      el("td", {}, el("button", { text: "Report", attrs: { type: "button" }, on: { click: () => openReport(e.eval_id) } })),
    );
  }

  async function loadEvals() {
    const body = $("#eval-list tbody");
    const { evals } = await api("/api/evals?limit=50");
    clear(body);
    if (!evals.length) body.append(el("tr", {}, el("td", { class: "muted", text: "No saved evaluations yet.", attrs: { colspan: 11 } })));
    body.append(...evals.map(evalRow));
    updateCompare();
  }

  const picked = (name) => document.querySelector(`input[name="${name}"]:checked`)?.value;

  function updateCompare() {
    const then = picked("eval-then");
    const now = picked("eval-now");
    $("#eval-compare").disabled = !(then && now && then !== now);
  }

  /** Fetch the report page (with the token, which a plain link could not send) into the sandbox. */
  async function openReport(evalId, baseline) {
    const frame = $("#eval-report");
    const note = $("#eval-compare-status");
    note.textContent = "Loading the report…";
    const query = baseline ? `?baseline=${encodeURIComponent(baseline)}` : "";
    const res = await fetch(`/api/evals/${encodeURIComponent(evalId)}/report${query}`, { headers: headers(false) });
    if (!res.ok) {
      note.textContent = `Could not load the report: ${(await failure(res)).message}`;
      return;
    }
    frame.srcdoc = await res.text();
    frame.hidden = false;
    frame.dataset.eval = evalId;
    frame.dataset.baseline = baseline || "";
    note.textContent = baseline ? `Report: ${evalId} against ${baseline}` : `Report: ${evalId}`;
  }

  async function compareSelected() {
    const then = picked("eval-then");
    const now = picked("eval-now");
    const diff = await api(`/api/evals/${encodeURIComponent(then)}/compare/${encodeURIComponent(now)}`);
    await openReport(now, then);
    $("#eval-compare-status").textContent =
      `${now} against ${then}: ${diff.better.length} better, ${diff.worse.length} worse`;
  }

  function progress(p) {
    if (p && p.total > 0) {
      bar.max = p.total;
      bar.value = p.done;
      status.textContent = `Running: ${p.done}/${p.total} questions`;
    }
  }

  /** Follow the run's events until done or failed; returns the final event's data. */
  async function follow(eventsUrl) {
    const res = await fetch(eventsUrl, { headers: headers(false) });
    if (!res.ok) throw await failure(res);
    let last = null;
    await readSSE(res, (name, data) => {
      if (name === "progress") progress(data.progress || data);
      else if (name === "running") status.textContent = "Running…";
      if (name === "done" || name === "failed") last = { name, data };
    });
    return last;
  }

  async function startRun(ev) {
    ev.preventDefault();
    if (running) return;
    running = true;
    $("#eval-start").disabled = true;
    bar.hidden = false;
    bar.removeAttribute("value");
    status.textContent = "Starting…";
    try {
      const limit = parseInt($("#eval-limit").value, 10);
      const body = { qa_set: $("#eval-qa").value, judge: $("#eval-judge").checked, ...(limit > 0 ? { limit } : {}) };
      const job = await api("/api/benchmarks/rag/runs", { method: "POST", body });
      const end = await follow(job.events);
      if (!end) status.textContent = "The event stream ended early.";
      else if (end.name === "failed") status.textContent = `Failed: ${end.data.error || "unknown error"}`;
      else {
        const report = end.data.report || {};
        bar.max = 1;
        bar.value = 1;
        status.textContent =
          `Done: ${report.successful_cases} of ${report.total_cases} questions` +
          (report.eval_id ? `, saved as ${report.eval_id}` : "");
        await loadEvals();
        if (report.eval_id) await openReport(report.eval_id);
      }
    } catch (exc) {
      status.textContent = `Could not run: ${exc.message}`;
    } finally {
      running = false;
      $("#eval-start").disabled = false;
    }
  }

  async function load() {
    try {
      await Promise.all([loadQASets(), loadEvals()]);
    } catch (exc) {
      status.textContent = `Could not load: ${exc.message}`;
    }
  }

  $("#eval-form").addEventListener("submit", startRun);
  $("#eval-compare").addEventListener("click", () =>
    compareSelected().catch((exc) => ($("#eval-compare-status").textContent = `Could not compare: ${exc.message}`)),
  );
  loaders.evaluate = load;
  if (!$("#page-evaluate").hidden) load(); // opened at #evaluate: app.js showed the page before this loader existed
})();
