/* sunlib web UI: ask (streamed over SSE), the run chain, search, notes and the index.
 *
 * Plain browser JavaScript, no build step and nothing loaded from elsewhere.
 * Safety rule: every string that comes from the server or a note is put in the page with
 * textContent / createTextNode (see el()), never parsed as HTML; notes can hold HTML and JS.
 */
(() => {
  "use strict";

  // ---------------------------------------------------------------------------------------
  // Small helpers

  const $ = (sel, root = document) => root.querySelector(sel);

  /** Build an element. props: class, text, attrs (strings), on (events), hidden. Children are
   *  nodes or strings (strings become text nodes, never markup). */
  function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    if (props.class) node.className = props.class;
    if (props.text !== undefined && props.text !== null) node.textContent = String(props.text);
    for (const [k, v] of Object.entries(props.attrs || {})) {
      if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const [k, v] of Object.entries(props.on || {})) node.addEventListener(k, v);
    if (props.hidden) node.hidden = true;
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    node.replaceChildren();
    return node;
  }

  function fmtMs(ms) {
    if (typeof ms !== "number") return "—";
    return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(ms < 10 ? 2 : 1)} ms`;
  }

  function fmtNum(v) {
    if (Number.isInteger(v)) return String(v);
    return String(Math.round(v * 10000) / 10000);
  }

  function fmtTime(epochSeconds) {
    const n = Number(epochSeconds);
    return Number.isFinite(n) && n > 0 ? new Date(n * 1000).toLocaleString() : "—";
  }

  const splitList = (s) =>
    s
      .split(/[,，]/)
      .map((x) => x.trim())
      .filter(Boolean);

  // ---------------------------------------------------------------------------------------
  // API access: JSON in and out, errors as ApiError {status, error, message}

  class ApiError extends Error {
    constructor(status, error, message) {
      super(message);
      this.status = status;
      this.error = error;
    }
  }

  const TOKEN_KEY = "sunlib.token";

  function headers(json) {
    const h = {};
    if (json) h["Content-Type"] = "application/json";
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) h.Authorization = `Bearer ${token}`;
    return h;
  }

  async function failure(res) {
    let body = {};
    try {
      body = await res.json();
    } catch {
      /* not JSON: keep the status line */
    }
    if (res.status === 401) $("#auth").hidden = false;
    return new ApiError(res.status, body.error || "http_error", body.message || `${res.status} ${res.statusText}`);
  }

  async function api(path, { method = "GET", body, signal } = {}) {
    const res = await fetch(path, {
      method,
      signal,
      headers: headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!res.ok) throw await failure(res);
    return res.json();
  }

  $("#auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("#auth-token").value.trim());
    $("#auth").hidden = true;
    showPage(currentPage, true);
  });

  // ---------------------------------------------------------------------------------------
  // Server-sent events over fetch(): EventSource cannot POST, so the stream is parsed here.

  /** Read an SSE response body, calling onEvent(name, data) per event (data JSON-parsed). */
  async function readSSE(response, onEvent) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let name = "";
    let data = [];
    const line = (text) => {
      if (text === "") {
        // a blank line ends the event
        if (data.length) onEvent(name || "message", JSON.parse(data.join("\n")));
        name = "";
        data = [];
        return;
      }
      if (text.startsWith(":")) return; // comment (keep-alive ping)
      const colon = text.indexOf(":");
      const field = colon < 0 ? text : text.slice(0, colon);
      let value = colon < 0 ? "" : text.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
    };
    for (;;) {
      const { value, done } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      // Lines end in \r\n, \n or \r. A \r at the very end may be half of a \r\n: wait for more.
      const re = /\r\n|\r|\n/g;
      let start = 0;
      let m;
      while ((m = re.exec(buffer))) {
        if (!done && m[0] === "\r" && m.index === buffer.length - 1) break;
        line(buffer.slice(start, m.index));
        start = m.index + m[0].length;
      }
      buffer = buffer.slice(start);
      if (done) {
        if (buffer) line(buffer);
        line("");
        return;
      }
    }
  }

  // ---------------------------------------------------------------------------------------
  // Pages

  let currentPage = "ask";
  const loaders = {}; // page name -> function run when the page is shown

  function showPage(name, reload = false) {
    if (!$(`#page-${name}`)) name = "ask";
    const changed = name !== currentPage;
    currentPage = name;
    for (const tab of document.querySelectorAll(".tab")) {
      if (tab.dataset.page === name) tab.setAttribute("aria-current", "page");
      else tab.removeAttribute("aria-current");
    }
    for (const page of document.querySelectorAll(".page")) page.hidden = page.id !== `page-${name}`;
    if (location.hash !== `#${name}`) history.replaceState(null, "", `#${name}`);
    if ((changed || reload) && loaders[name]) loaders[name]();
  }

  for (const tab of document.querySelectorAll(".tab")) {
    tab.addEventListener("click", () => showPage(tab.dataset.page));
  }
  window.addEventListener("hashchange", () => showPage(location.hash.slice(1)));

  // ---------------------------------------------------------------------------------------
  // Answer text: [ref:chk_…] markers become numbered citation chips, `code` becomes <code>

  const REF = /\[ref:([A-Za-z0-9_\-]+)\]/g;

  /** Append text to parent, with `inline code` spans as <code> (as text, never markup). */
  function appendInline(parent, text) {
    const parts = text.split("`");
    parts.forEach((part, i) => {
      if (!part) return;
      // odd parts sit between backticks; an unclosed last backtick stays literal
      if (i % 2 === 1 && i < parts.length - 1) parent.append(el("code", { text: part }));
      else appendBold(parent, (i % 2 === 1 ? "`" : "") + part);
    });
  }

  /** Text with **bold** runs (the reader's span in an extractive answer) as <strong>; an unclosed ** stays literal. */
  function appendBold(parent, text) {
    const parts = text.split("**");
    parts.forEach((part, i) => {
      if (!part) return;
      if (i % 2 === 1 && i < parts.length - 1) parent.append(el("strong", { class: "answer-span", text: part }));
      else parent.append((i % 2 === 1 ? "**" : "") + part);
    });
  }

  /**
   * Render an answer into `target`. refs maps chunk_id -> chip number (filled in order of first
   * appearance, shared with the source cards); citations maps chunk_id -> Citation.
   * While streaming, a half-received marker at the end ("[ref:chk_12") is held back.
   */
  function renderAnswerText(target, text, ctx) {
    clear(target);
    if (ctx.streaming) text = text.replace(/\[(r(e(f(:[A-Za-z0-9_\-]*)?)?)?)?$/, "");
    const unsupported = new Set((ctx.sentences || []).filter((s) => !s.supported).map((s) => s.text.trim()));
    let last = 0;
    let sentence = el("span", { class: "sentence" });
    const flush = () => {
      const key = sentence.textContent.trim();
      if (key && unsupported.has(key)) {
        sentence.classList.add("unsupported");
        sentence.title = "the citation verifier did not find support for this sentence";
      }
      if (sentence.childNodes.length) target.append(sentence);
      sentence = el("span", { class: "sentence" });
    };
    for (const m of text.matchAll(REF)) {
      appendInline(sentence, text.slice(last, m.index));
      flush();
      target.append(citationChip(m[1], ctx));
      last = m.index + m[0].length;
    }
    appendInline(sentence, text.slice(last));
    flush();
  }

  function refNumber(chunkId, ctx) {
    if (!ctx.refs.has(chunkId)) ctx.refs.set(chunkId, ctx.refs.size + 1);
    return ctx.refs.get(chunkId);
  }

  function citationChip(chunkId, ctx) {
    const n = refNumber(chunkId, ctx);
    const cit = ctx.citations.get(chunkId);
    const label = cit
      ? `Citation ${n}: ${cit.title} (${cit.path}, lines ${cit.start_line}–${cit.end_line})`
      : `Citation ${n}` + (ctx.streaming ? "" : " (not verified against the context)");
    return el("button", {
      class: "cite-chip" + (cit ? "" : " pending"),
      text: `[${n}]`,
      attrs: { type: "button", "data-chunk-id": chunkId, "aria-label": label, title: label, disabled: !cit },
      on: { click: (ev) => cit && openNote(cit.note_id, cit, ev.currentTarget) },
    });
  }

  // ---------------------------------------------------------------------------------------
  // Ask: stream a question, render the answer, sources and run chain

  const askForm = $("#ask-form");
  const question = $("#question");
  let askAbort = null;

  question.addEventListener("keydown", (ev) => {
    // Enter asks; Shift+Enter is a new line; Enter that confirms an IME composition (Chinese,
    // Japanese input) must not send the question.
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing && ev.keyCode !== 229) {
      ev.preventDefault();
      askForm.requestSubmit();
    }
  });

  askForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = question.value.trim();
    if (!q) return;
    question.value = ""; // the question stays on the page, above its answer; the box is for the next one
    ask(q);
  });

  /** The state of the answer on screen (streamed or loaded from a saved run). */
  function newAnswerContext() {
    return { refs: new Map(), citations: new Map(), sentences: [], streaming: true, text: "", steps: [] };
  }

  function resetAnswer(label) {
    const answer = $("#answer");
    answer.hidden = false;
    answer.className = "answer streaming";
    answer.setAttribute("aria-busy", "true");
    setBadge(label, "busy");
    $("#answer-meta").textContent = "";
    $("#answer-question").textContent = "";
    $("#answer-standalone").hidden = true;
    $("#answer-standalone").textContent = "";
    $("#refusal").hidden = true;
    $("#refusal-reason").textContent = "";
    clear($("#answer-text"));
    const err = $("#answer-error");
    err.hidden = true;
    err.textContent = "";
    $("#sources").hidden = true;
    clear($("#source-list"));
    const chain = $("#run-chain");
    chain.hidden = false;
    clear($("#chain-steps"));
    $("#chain-summary").hidden = true;
    clear($("#chain-summary"));
    $("#chain-count").textContent = "";
  }

  function setBadge(text, kind) {
    const badge = $("#answer-state");
    badge.textContent = text;
    badge.className = `badge ${kind}`;
  }

  async function ask(q) {
    if (askAbort) askAbort.abort();
    const controller = new AbortController();
    askAbort = controller;
    const ctx = newAnswerContext();
    keepEarlierTurn();
    resetAnswer("Thinking…");
    $("#answer-question").textContent = q;
    $("#ask-btn").disabled = true;
    let pendingFrame = 0;
    const paint = () => {
      // tokens can arrive faster than frames: repaint at most once per frame
      if (pendingFrame) return;
      pendingFrame = requestAnimationFrame(() => {
        pendingFrame = 0;
        renderAnswerText($("#answer-text"), ctx.text, ctx);
      });
    };
    let finished = false;
    try {
      await stepsReady;
      const res = await fetch("/api/ask/stream", {
        method: "POST",
        headers: { ...headers(true), Accept: "text/event-stream" },
        body: JSON.stringify({ question: q, conversation_id: convo.id, agentic: $("#agentic").checked ? true : null }),
        signal: controller.signal,
      });
      if (!res.ok) throw await failure(res);
      await readSSE(res, (name, data) => {
        if (controller !== askAbort) return; // a newer question took over
        switch (name) {
          case "step":
            ctx.steps.push(data);
            addStepCard(data, ctx.steps.length);
            showRewrite(data, ctx);
            break;
          case "context_built":
            $("#answer-meta").textContent = `${data.chunks.length} passages in the context, ~${data.token_estimate} tokens`;
            setBadge("Writing…", "busy");
            break;
          case "token":
            ctx.text += data.delta;
            paint();
            break;
          case "citations":
            for (const c of data.citations) ctx.citations.set(c.chunk_id, c);
            ctx.sentences = data.sentences || [];
            ctx.sources = data.sources || [];
            break;
          case "finish":
            finished = true;
            showFinish(data, ctx);
            keepTurn(q, data, ctx);
            break;
          case "error":
            finished = true;
            showError(`${data.message} (${data.error})`);
            break;
        }
      });
      if (!finished && controller === askAbort) showError("the answer stream ended early");
    } catch (exc) {
      if (exc.name === "AbortError") return;
      showError(exc instanceof ApiError ? `${exc.message} (${exc.error})` : `could not reach the server: ${exc.message}`);
    } finally {
      if (pendingFrame) cancelAnimationFrame(pendingFrame);
      if (controller === askAbort) {
        $("#ask-btn").disabled = false;
        $("#answer").setAttribute("aria-busy", "false");
        askAbort = null;
        loadRuns();
        loadConversations();
      }
    }
  }

  function showError(message) {
    const answer = $("#answer");
    answer.className = "answer errored";
    setBadge("Error", "error");
    const err = $("#answer-error");
    err.hidden = false;
    err.textContent = message;
  }

  /** The final state: a cited answer, a refusal with its reason, or a direct reply. */
  function showFinish(data, ctx) {
    ctx.streaming = false;
    ctx.text = data.answer || "";
    const answer = $("#answer");
    const meta = [];
    if (data.refused) {
      answer.className = "answer refused";
      setBadge("Refused", "refused");
      $("#refusal").hidden = false;
      $("#refusal-reason").textContent = data.refusal_reason || "no reason given";
    } else {
      answer.className = "answer answered";
      const level = data.confidence_level || "high";
      setBadge(data.route === "direct" ? "Direct reply" : `Answered · ${level} confidence`, `ok ${level}`);
      if (data.unsupported) meta.push(`${data.unsupported} sentence(s) not supported by the cited text`);
      if (data.dropped) meta.push(`${data.dropped} unsupported sentence(s) dropped by the citation verifier`);
    }
    if (typeof data.confidence === "number") meta.push(`confidence ${fmtNum(data.confidence)}`);
    if (typeof data.total_ms === "number") meta.push(fmtMs(data.total_ms));
    $("#answer-meta").textContent = meta.join(" · ");
    renderAnswerText($("#answer-text"), ctx.text, ctx);
    renderSources(ctx);
    renderChainSummary(data, ctx);
  }

  /** The reader's reading of each kept chunk (chunk id -> {probability, span}), from the last selection step. */
  function readingsOf(ctx) {
    const found = new Map();
    for (const step of ctx.steps || []) {
      const passages = step.details && step.details.reader && step.details.reader.passages;
      if (Array.isArray(passages)) for (const p of passages) found.set(p.chunk_id, p);
    }
    return found;
  }

  function readerLine(src, readings) {
    const read = src.chunk_ids.map((id) => readings.get(id)).filter(Boolean);
    if (!read.length) return null;
    const best = read.reduce((a, b) => (b.probability > a.probability ? b : a));
    return el(
      "p",
      { class: "reader-line" },
      el("span", { class: "muted", text: `reader ${fmtNum(best.probability)}` }),
      best.span ? [" · ", el("mark", { class: "reader-span", text: best.span.trim() })] : null,
    );
  }

  function renderSources(ctx) {
    const list = clear($("#source-list"));
    const readings = readingsOf(ctx);
    for (const src of ctx.sources || []) {
      const first = ctx.citations.get(src.chunk_ids[0]);
      const facts = [src.chapter && `chapter ${src.chapter}`, src.version && `version ${src.version}`].filter(Boolean);
      const chunks = el(
        "span",
        { class: "chunks" },
        "chunks used: ",
        src.chunk_ids.map((id) => citationChip(id, ctx)),
      );
      list.append(
        el(
          "li",
          { class: "source-card", attrs: { "data-note-id": src.note_id } },
          el("button", {
            class: "link source-open",
            text: src.title || src.path,
            attrs: { type: "button" },
            on: { click: (ev) => openNote(src.note_id, first || null, ev.currentTarget) },
          }),
          el("span", { class: "path", text: src.path }),
          facts.length ? el("span", { class: "muted", text: facts.join(" · ") }) : null,
          src.summary ? el("p", { class: "summary", text: src.summary }) : null,
          readerLine(src, readings),
          chunks,
        ),
      );
    }
    $("#sources").hidden = !list.childElementCount;
  }

  // ---------------------------------------------------------------------------------------
  // Run chain: one card per step, details as key/value tables, and a summary card

  /** The step registry from the server (GET /api/steps): for each step name the detail keys shown
   *  first (the rest follow in server order), and which step holds the run's summary. */
  const stepInfo = { lead: {}, summary: null, round: null };
  const stepsReady = api("/api/steps")
    .then((data) => {
      for (const s of data.steps) stepInfo.lead[s.name] = s.lead_keys;
      stepInfo.summary = data.summary;
      stepInfo.round = data.round;
    })
    .catch(() => {
      /* without the registry the chain still renders, in server order */
    });

  /** One card per step. A step with a parent_id (a round of a multi-round run and what ran inside
   *  it) goes in its parent's list of children. Steps arrive as they end, so children come before
   *  their parent: the parent's card is made as a placeholder first and filled when it arrives. */
  function addStepCard(step, n) {
    const spanSel = (id) => `#chain-steps [data-span="${CSS.escape(id)}"]`;
    const existing = step.span_id ? $(spanSel(step.span_id)) : null;
    const card = existing || el("li", { attrs: { "data-span": step.span_id || null } });
    const children = card.querySelector(":scope > ol.step-children");
    card.className = `step-card status-${step.status}`;
    card.setAttribute("data-step", step.name);
    if (step.iteration) card.setAttribute("data-iteration", step.iteration);
    card.replaceChildren(...[stepDetails(step, n), transitionsBlock(step)].filter(Boolean));
    if (children) card.append(children);
    if (!existing || existing.dataset.pending) {
      delete card.dataset.pending;
      let list = $("#chain-steps");
      if (step.parent_id) {
        let parent = $(spanSel(step.parent_id));
        if (!parent) {
          parent = el("li", { class: "step-card pending", attrs: { "data-span": step.parent_id, "data-pending": "1" } });
          list.append(parent);
        }
        list = parent.querySelector(":scope > ol.step-children");
        if (!list) {
          list = el("ol", { class: "step-children" });
          parent.append(list);
        }
      }
      list.append(card);
    }
    $("#chain-count").textContent = `(${n} steps)`;
  }

  function stepDetails(step, n) {
    return el(
      "details",
      {},
      el(
        "summary",
        {},
        el("span", { class: "step-n", text: n }),
        el("span", { class: "step-name", text: step.iteration && !step.parent_id ? `${step.name} ${step.iteration}` : step.name }),
        el("span", { class: `status status-${step.status}`, text: step.status }),
        el("span", { class: "latency", text: fmtMs(step.latency_ms) }),
        el("span", { class: "step-out", text: step.output_summary }),
        stepCaption(step),
      ),
      el(
        "div",
        { class: "step-body" },
        step.input_summary ? el("p", {}, el("strong", { text: "Input: " }), step.input_summary) : null,
        el("p", {}, el("strong", { text: "Output: " }), step.output_summary || "—"),
        Object.keys(step.details || {}).length
          ? [
              renderValue(orderKeys(step.details, stepInfo.lead[step.name] || []), 0),
              el("details", { class: "raw" }, el("summary", { text: "JSON" }), el("pre", { text: JSON.stringify(step.details, null, 2) })),
            ]
          : el("p", { class: "muted", text: "no details" }),
      ),
    );
  }

  /** What an agentic run's spans say at a glance, shown without opening them: a round's
   *  sub-question, query, hits and verdict; the loop's parts, retrievals and the cap that stopped it. */
  function stepCaption(step) {
    const d = step.details || {};
    const parts = [];
    if (step.name === stepInfo.round) {
      if (d.question) parts.push(`sub-question ${d.sub_question ?? ""}: ${d.question}`);
      if (d.query && d.query !== d.question) parts.push(`query: ${d.query}`);
      if (typeof d.hits === "number") parts.push(`${d.hits} hits`);
      if (d.verdict) parts.push(`verdict: ${d.verdict}`);
    } else if (Array.isArray(d.transitions)) {
      if (Array.isArray(d.sub_questions)) parts.push(`${d.sub_questions.length} sub-question(s)`);
      if (typeof d.retrievals === "number") parts.push(d.retrievals === 1 ? "1 retrieval" : `${d.retrievals} retrievals`);
      parts.push(d.stopped_by ? `stopped by ${d.stopped_by}` : "no cap reached");
    }
    return parts.length ? el("span", { class: "step-caption", text: parts.join(" · ") }) : null;
  }

  /** The loop's transitions (state → next state, the event and why), under its card. */
  function transitionsBlock(step) {
    const moves = step.details && step.details.transitions;
    if (!Array.isArray(moves) || !moves.length) return null;
    return el(
      "details",
      { class: "transitions" },
      el("summary", { text: `Transitions (${moves.length})` }),
      el(
        "ol",
        {},
        moves.map((t) => el("li", {}, el("code", { text: `${t.state} → ${t.next}` }), ` (${t.event}) ${t.reason || ""}`)),
      ),
    );
  }

  function orderKeys(obj, lead) {
    const out = {};
    for (const k of lead) if (k in obj) out[k] = obj[k];
    for (const [k, v] of Object.entries(obj)) if (!(k in out)) out[k] = v;
    return out;
  }

  const isPlain = (v) => v === null || typeof v !== "object";
  // {rank, score, contribution}: one retrieval route's view of a hit
  const isRouteScore = (v) => v && typeof v === "object" && "rank" in v && "score" in v && Object.keys(v).length <= 3;

  /** Details as readable HTML: objects as key/value tables, lists of objects as tables. */
  function renderValue(v, depth) {
    if (v === null || v === undefined) return el("span", { class: "muted", text: "—" });
    if (typeof v === "boolean") return el("span", { class: v ? "yes" : "no", text: v ? "yes" : "no" });
    if (typeof v === "number") return el("span", { class: "num", text: fmtNum(v) });
    if (typeof v === "string") {
      return v.length > 160 || v.includes("\n") ? el("pre", { class: "longtext", text: v }) : el("span", { text: v });
    }
    if (depth > 4) return el("pre", { text: JSON.stringify(v, null, 2) });
    if (Array.isArray(v)) {
      if (!v.length) return el("span", { class: "muted", text: "none" });
      if (v.every(isPlain)) return el("span", { text: v.map((x) => (typeof x === "number" ? fmtNum(x) : String(x))).join(", ") });
      if (v.every((x) => x && typeof x === "object" && !Array.isArray(x))) return renderRows(v, depth);
      return el("ol", {}, v.map((x) => el("li", {}, renderValue(x, depth + 1))));
    }
    if (isRouteScore(v)) {
      const c = typeof v.contribution === "number" ? ` (${v.contribution >= 0 ? "+" : ""}${fmtNum(v.contribution)})` : "";
      return el("span", { class: "num", text: `#${v.rank} · ${fmtNum(v.score)}${c}` });
    }
    const entries = Object.entries(v);
    if (!entries.length) return el("span", { class: "muted", text: "none" });
    return el(
      "table",
      { class: "kv" },
      el(
        "tbody",
        {},
        entries.map(([k, x]) => el("tr", {}, el("th", { attrs: { scope: "row" }, text: k }), el("td", {}, renderValue(x, depth + 1)))),
      ),
    );
  }

  function renderRows(rows, depth) {
    const cols = [];
    for (const r of rows) for (const k of Object.keys(r)) if (!cols.includes(k)) cols.push(k);
    return el(
      "div",
      { class: "table-wrap" },
      el(
        "table",
        { class: "rows" },
        el("thead", {}, el("tr", {}, cols.map((c) => el("th", { attrs: { scope: "col" }, text: c })))),
        el("tbody", {}, rows.map((r) => el("tr", {}, cols.map((c) => el("td", {}, renderValue(r[c], depth + 1)))))),
      ),
    );
  }

  function renderChainSummary(finish, ctx) {
    const summary = (ctx.steps.find((s) => s.name === stepInfo.summary && !s.parent_id) || {}).details || {};
    const runId = finish.run_id || summary.trace_saved;
    const facts = [
      ["Total latency", fmtMs(finish.total_ms ?? summary.total_ms)],
      ["Tokens (in / out)", `${summary.tokens_in ?? 0} / ${summary.tokens_out ?? 0}`],
      ["Retrieved chunks", summary.retrieved ?? "—"],
      ["Selected chunks", summary.selected ?? "—"],
      ["Citations", summary.citations ?? ctx.citations.size],
      ["Route", finish.route || "—"],
      ["Outcome", finish.refused ? "refused" : "answered"],
    ];
    const box = clear($("#chain-summary"));
    box.append(
      el("h3", { text: "Summary" }),
      el("dl", {}, facts.map(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })])),
      runId
        ? el(
            "p",
            { class: "run-id" },
            "Saved run: ",
            el("a", { text: runId, attrs: { href: `/api/runs/${encodeURIComponent(runId)}`, target: "_blank", rel: "noopener" } }),
          )
        : null,
    );
    box.hidden = false;
  }

  // Recent runs: a saved run re-renders its answer and chain from the stored frame and trace

  async function loadRuns() {
    const list = $("#run-list");
    try {
      const data = await api("/api/runs?limit=10");
      clear(list);
      for (const run of data.runs) {
        list.append(
          el(
            "li",
            {},
            el("button", {
              class: "link",
              text: run.question || run.run_id,
              attrs: { type: "button" },
              on: { click: () => showSavedRun(run.run_id) },
            }),
            el("span", { class: "muted", text: ` ${run.refused ? "refused" : "answered"} · ${fmtTime(run.created_at)}` }),
          ),
        );
      }
      if (!data.runs.length) list.append(el("li", { class: "muted", text: "no runs yet" }));
    } catch (exc) {
      clear(list).append(el("li", { class: "error", text: `runs: ${exc.message}` }));
    }
  }

  async function showSavedRun(runId) {
    newConversation(); // a saved run is shown on its own; a question after it starts a new conversation
    resetAnswer("Loading…");
    try {
      await stepsReady;
      const run = await api(`/api/runs/${encodeURIComponent(runId)}`);
      const frame = run.frame || {};
      const ctx = newAnswerContext();
      $("#answer-question").textContent = frame.question || run.question || "";
      for (const c of frame.citations || []) ctx.citations.set(c.chunk_id, c);
      ctx.sentences = frame.sentences || [];
      ctx.sources = frame.sources || [];
      for (const s of (run.trace && run.trace.steps) || []) {
        ctx.steps.push(s);
        addStepCard(s, ctx.steps.length);
        showRewrite(s, ctx);
      }
      showFinish({ ...frame, run_id: run.run_id, total_ms: run.total_ms }, ctx);
    } catch (exc) {
      showError(exc.message);
    } finally {
      $("#answer").setAttribute("aria-busy", "false");
    }
  }

  // ---------------------------------------------------------------------------------------
  // The conversation: earlier turns stay on the page as a thread; each question goes with the
  // conversation's id (from the first answer's finish event), so a follow-up is asked standalone.

  const convo = { id: null, turns: [], current: null }; // current: the newest turn, shown as the answer

  /** A follow-up's standalone form, from the step that recorded the rewrite. */
  function showRewrite(step, ctx) {
    const rewrite = step.details && step.details.follow_up;
    if (!rewrite || typeof rewrite.standalone !== "string") return;
    ctx.standalone = rewrite.standalone;
    const line = $("#answer-standalone");
    line.textContent = `Asked as: ${rewrite.standalone}`;
    line.hidden = false;
  }

  function keepTurn(q, finish, ctx) {
    convo.current = {
      question: q,
      standalone: ctx.standalone || null,
      answer: finish.answer || "",
      refused: !!finish.refused,
      citations: [...ctx.citations.values()],
      run_id: finish.run_id,
    };
    if (finish.conversation_id) convo.id = finish.conversation_id;
    conversationControls();
  }

  /** The answer on screen becomes the last turn of the thread before the next question. */
  function keepEarlierTurn() {
    if (!convo.current) return;
    convo.turns.push(convo.current);
    convo.current = null;
    renderThread();
  }

  function renderThread() {
    const list = clear($("#thread"));
    convo.turns.forEach((t, i) => list.append(threadTurn(t, i + 1)));
    list.hidden = !convo.turns.length;
  }

  function threadTurn(t, n) {
    const ctx = { refs: new Map(), citations: new Map((t.citations || []).map((c) => [c.chunk_id, c])), sentences: [] };
    const answer = el("p", { class: "turn-answer" });
    renderAnswerText(answer, t.answer, ctx);
    return el(
      "li",
      { class: `turn ${t.refused ? "refused" : "answered"}`, attrs: { "data-turn": n } },
      el("p", { class: "turn-question", text: t.question }),
      t.standalone ? el("p", { class: "standalone muted", text: `Asked as: ${t.standalone}` }) : null,
      answer,
      t.run_id
        ? el(
            "p",
            { class: "run-id muted" },
            el("a", { text: "saved run", attrs: { href: `/api/runs/${encodeURIComponent(t.run_id)}`, target: "_blank", rel: "noopener" } }),
          )
        : null,
    );
  }

  function conversationControls() {
    const turns = convo.turns.length + (convo.current ? 1 : 0);
    $("#new-conversation").hidden = !turns && !convo.id;
    $("#conversation-status").textContent = convo.id
      ? `Conversation ${convo.id} · ${turns} turn(s)`
      : turns
        ? "Not saved by this server: each question is asked on its own"
        : "";
  }

  function newConversation() {
    if (askAbort) askAbort.abort();
    askAbort = null;
    $("#ask-btn").disabled = false;
    convo.id = null;
    convo.turns = [];
    convo.current = null;
    renderThread();
    $("#answer").hidden = true;
    $("#run-chain").hidden = true;
    conversationControls();
  }

  $("#new-conversation").addEventListener("click", () => {
    newConversation();
    question.focus();
  });

  async function loadConversations() {
    const list = $("#conversation-list");
    try {
      const data = await api("/api/conversations?limit=10");
      clear(list);
      for (const c of data.conversations) {
        list.append(
          el(
            "li",
            {},
            el("button", {
              class: "link",
              text: c.first_question || c.conversation_id,
              attrs: { type: "button", "data-conversation-id": c.conversation_id },
              on: { click: () => resumeConversation(c.conversation_id) },
            }),
            el("span", { class: "muted", text: ` ${c.turns} turn(s) · ${fmtTime(c.updated_at)}` }),
          ),
        );
      }
      if (!data.conversations.length) list.append(el("li", { class: "muted", text: "no conversations yet" }));
    } catch (exc) {
      clear(list).append(el("li", { class: "error", text: `conversations: ${exc.message}` }));
    }
  }

  /** A saved conversation back on the page: its turns as the thread; the next question continues it. */
  async function resumeConversation(id) {
    try {
      const data = await api(`/api/conversations/${encodeURIComponent(id)}`);
      newConversation();
      convo.id = data.conversation_id;
      convo.turns = data.turns;
      renderThread();
      conversationControls();
      question.focus();
    } catch (exc) {
      $("#conversation-status").textContent = `Could not open the conversation: ${exc.message}`;
    }
  }

  // ---------------------------------------------------------------------------------------
  // Note viewer: the note's text with the cited span in <mark class="cited">

  let viewerSeq = 0; // the latest request wins when clicks overlap
  let viewerOpener = null; // where focus returns when the viewer closes

  async function openNote(noteId, citation, opener) {
    const seq = ++viewerSeq;
    viewerOpener = opener || null;
    const body = clear($("#viewer-body"));
    $("#viewer-title").textContent = citation ? citation.title : "Note";
    $("#viewer-meta").textContent = "Loading…";
    $("#viewer-close").hidden = false;
    $("#viewer").classList.add("open");
    let note;
    try {
      note = await api(`/api/notes/${encodeURIComponent(noteId)}`);
    } catch (exc) {
      if (seq !== viewerSeq) return;
      $("#viewer-meta").textContent = "";
      body.append(el("p", { class: "error", text: `Could not load the note: ${exc.message} (${exc.status})` }));
      citedQuoteOnly(body, citation);
      return;
    }
    if (seq !== viewerSeq) return;
    $("#viewer-title").textContent = note.title || note.path;
    const meta = [note.path];
    const tags = listOf(note.tags);
    if (tags.length) meta.push(`tags: ${tags.join(", ")}`);
    if (citation) {
      meta.push(`lines ${citation.start_line}–${citation.end_line}`);
      if (citation.heading_path && citation.heading_path.length) meta.push(citation.heading_path.join(" › "));
    }
    $("#viewer-meta").textContent = meta.join(" · ");
    if (typeof note.content !== "string") {
      // the file changed on disk and could not be read in step with the index
      body.append(el("p", { class: "error", text: "The note file is out of step with the index; rebuild the index." }));
      citedQuoteOnly(body, citation);
      return;
    }
    const text = note.content;
    const pre = el("pre", { class: "note-text" });
    // Offsets are UTF-16 code units, which is what JS string indices count: slice directly.
    const start = citation ? Math.max(0, Math.min(citation.start, text.length)) : 0;
    const end = citation ? Math.max(start, Math.min(citation.end, text.length)) : 0;
    if (citation && end > start) {
      const cited = text.slice(start, end);
      if (citation.quote && squash(citation.quote) !== squash(cited)) {
        // an old run's citation into a note edited since: the offsets may point elsewhere now
        body.append(el("p", { class: "warning", text: "This note changed after the answer was written; the marked span may be off." }));
      }
      const mark = el("mark", { class: "cited", text: cited, attrs: { "data-chunk-id": citation.chunk_id } });
      pre.append(text.slice(0, start), mark, text.slice(end));
      body.append(pre);
      scrollToMark(body, mark);
    } else {
      pre.append(text);
      body.append(pre);
      body.scrollTop = 0;
    }
    $("#viewer-title").focus({ preventScroll: true });
  }

  const squash = (s) => s.replace(/\s+/g, " ").trim();
  const listOf = (v) => (Array.isArray(v) ? v : v ? [v] : []).map(String);

  /** When the note itself cannot be shown, show at least what was cited, from the citation. */
  function citedQuoteOnly(body, citation) {
    if (!citation) return;
    body.append(el("p", { class: "muted", text: `Cited passage (${citation.path}, lines ${citation.start_line}–${citation.end_line}):` }));
    body.append(el("pre", { class: "note-text" }, el("mark", { class: "cited-quote", text: citation.quote })));
  }

  /** Centre the mark inside the viewer's own scroll box. (mark.scrollIntoView() would also
   *  scroll the page, which jumps the layout; the page is scrolled only when the viewer itself
   *  is off screen, as on narrow screens where it sits below the page.) */
  function scrollToMark(box, mark) {
    const b = box.getBoundingClientRect();
    const m = mark.getBoundingClientRect();
    const room = Math.max(0, box.clientHeight - m.height);
    box.scrollTop += m.top - b.top - room / 2;
    const v = $("#viewer").getBoundingClientRect();
    if (v.top < 0 || v.top > window.innerHeight - 80) mark.scrollIntoView({ block: "center" });
  }

  function closeViewer() {
    viewerSeq++;
    $("#viewer").classList.remove("open");
    $("#viewer-title").textContent = "Note";
    $("#viewer-meta").textContent = "";
    $("#viewer-close").hidden = true;
    clear($("#viewer-body")).append(
      el("p", { class: "muted placeholder", text: "Click a citation, a source or a search result to read the note here." }),
    );
    if (viewerOpener && viewerOpener.isConnected) viewerOpener.focus();
    viewerOpener = null;
  }

  $("#viewer-close").addEventListener("click", closeViewer);
  $("#viewer").addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && !$("#viewer-close").hidden) closeViewer();
  });

  // ---------------------------------------------------------------------------------------
  // Search

  $("#search-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const q = $("#search-query").value.trim();
    if (!q) return;
    const status = $("#search-status");
    const list = clear($("#search-results"));
    status.textContent = "Searching…";
    const folder = $("#search-folder").value.trim();
    const body = {
      query: q,
      mode: $("#search-mode").value,
      filters: { folders: folder ? [folder] : [], tags: splitList($("#search-tag").value) },
      limit: 20,
    };
    try {
      const data = await api("/api/search", { method: "POST", body });
      const warn = data.warnings && data.warnings.length ? ` · ${data.warnings.join("; ")}` : "";
      status.textContent = `${data.results.length} results (${data.mode}, ${data.total_candidates} candidates)${warn}`;
      for (const hit of data.results) list.append(resultItem(hit));
    } catch (exc) {
      status.textContent = "";
      list.append(el("li", { class: "error", text: `${exc.message} (${exc.error || "error"})` }));
    }
  });

  function resultItem(hit) {
    const cit = hit.citation;
    const routes = Object.entries(hit.routes || {})
      .map(([name, r]) => `${name} #${r.rank}`)
      .join(", ");
    return el(
      "li",
      { class: "result", attrs: { "data-chunk-id": hit.chunk_id } },
      el(
        "div",
        { class: "result-head" },
        el("button", {
          class: "link result-open",
          text: hit.title || hit.path,
          attrs: { type: "button" },
          on: { click: (ev) => openNote(hit.note_id, cit, ev.currentTarget) },
        }),
        el("span", { class: "score num", text: fmtNum(hit.score) }),
      ),
      el("p", { class: "path" }, `${hit.path}`, hit.heading_path.length ? ` › ${hit.heading_path.join(" › ")}` : ""),
      snippet(hit.snippet, hit.highlights),
      el("p", { class: "muted cite-line", text: `${cit.path}:${cit.start_line}–${cit.end_line}${routes ? " · " + routes : ""}` }),
    );
  }

  /** The snippet with query matches in <mark class="hl">. Highlight offsets are code points
   *  (Python string indices), so the snippet is walked as code points, not UTF-16 units. */
  function snippet(text, highlights) {
    const chars = Array.from(text || "");
    const p = el("p", { class: "snippet" });
    let at = 0;
    for (const [s, e] of highlights || []) {
      if (s < at || e <= s) continue;
      p.append(chars.slice(at, s).join(""), el("mark", { class: "hl", text: chars.slice(s, e).join("") }));
      at = e;
    }
    p.append(chars.slice(at).join(""));
    return p;
  }

  // ---------------------------------------------------------------------------------------
  // Notes browser

  const NOTES_PAGE = 50;
  let notesOffset = 0;

  async function loadNotes() {
    const status = $("#notes-status");
    const list = clear($("#note-list"));
    const params = new URLSearchParams({ limit: NOTES_PAGE, offset: notesOffset });
    const folder = $("#notes-folder").value.trim();
    const tag = $("#notes-tag").value.trim();
    if (folder) params.set("folder", folder);
    if (tag) params.set("tag", tag);
    status.textContent = "Loading…";
    try {
      const data = await api(`/api/notes?${params}`);
      const shown = data.notes.length;
      status.textContent = shown
        ? `Notes ${data.offset + 1}–${data.offset + shown} of ${data.total}`
        : "No notes match these filters.";
      for (const note of data.notes) {
        list.append(
          el(
            "li",
            { class: "note-item", attrs: { "data-note-id": note.note_id } },
            el("button", {
              class: "link note-open",
              text: note.title || note.path,
              attrs: { type: "button" },
              on: { click: (ev) => openNote(note.note_id, null, ev.currentTarget) },
            }),
            el("span", { class: "path", text: note.path }),
            listOf(note.tags).length ? el("span", { class: "tags" }, listOf(note.tags).map((t) => el("span", { class: "tag", text: t }))) : null,
            el("span", { class: "muted", text: fmtTime(note.mtime) }),
          ),
        );
      }
      rememberFolders(data.notes.map((n) => n.path));
      $("#notes-prev").disabled = data.offset <= 0;
      $("#notes-next").disabled = data.offset + shown >= data.total;
    } catch (exc) {
      status.textContent = "";
      const missing = exc.status === 404 || exc.status === 405;
      list.append(
        el("li", {
          class: "error",
          text: missing ? "The notes API is not available on this server (GET /api/notes)." : `${exc.message}`,
        }),
      );
    }
  }

  /** Offer the folders seen so far as suggestions in the folder inputs. */
  const folders = new Set();
  function rememberFolders(paths) {
    for (const path of paths) {
      const parts = path.split("/").slice(0, -1);
      for (let i = 1; i <= parts.length; i++) folders.add(parts.slice(0, i).join("/"));
    }
    clear($("#folder-options")).append(...[...folders].sort().map((f) => el("option", { attrs: { value: f } })));
  }

  $("#notes-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    notesOffset = 0;
    loadNotes();
  });
  $("#notes-prev").addEventListener("click", () => {
    notesOffset = Math.max(0, notesOffset - NOTES_PAGE);
    loadNotes();
  });
  $("#notes-next").addEventListener("click", () => {
    notesOffset += NOTES_PAGE;
    loadNotes();
  });
  loaders.notes = loadNotes;

  // ---------------------------------------------------------------------------------------
  // Index status and rebuild

  async function loadStatus() {
    const box = $("#index-status");
    try {
      const s = await api("/api/index/status");
      const counts = s.counts || {};
      clear(box).append(
        el("h3", { text: "Index" }),
        renderValue(
          {
            vault: s.vault,
            notes: counts.notes,
            chunks: counts.chunks,
            "cached embeddings": counts.cached_embeddings,
            "active space": s.active_space,
            "vectors embedded": s.vectors_total,
            "vectors pending": s.vectors_pending,
            chunker: s.chunker,
            "text indexed at": fmtTime(s.text_indexed_at),
            "index file": s.index,
          },
          0,
        ),
        el("h3", { text: "Embedding spaces" }),
        (s.spaces || []).length ? renderRows(s.spaces, 0) : el("p", { class: "muted", text: "none yet" }),
        el("h3", { text: "Embedding progress" }),
        renderRows(
          (s.embedding || []).map((e) => ({
            tier: e.role,
            space: e.space,
            embedded: `${e.embedded}/${e.total}`,
            state: e.running ? "running" : e.pending ? "waiting" : "done",
            pace: e.rate ? `${e.rate.toFixed(1)} chunks/s` : "",
            eta: e.eta_s == null ? "" : `${Math.round(e.eta_s)} s`,
          })),
          0,
        ),
      );
      const running = (s.jobs || []).find((j) => j.status === "queued" || j.status === "running");
      if (running && !polling) pollJob(running.job_id);
    } catch (exc) {
      clear(box).append(el("p", { class: "error", text: `${exc.message} (${exc.error || "error"})` }));
    }
  }

  let polling = false;

  async function pollJob(jobId) {
    polling = true;
    const btn = $("#rebuild-btn");
    const bar = $("#rebuild-progress");
    const status = $("#rebuild-status");
    btn.disabled = true;
    bar.hidden = false;
    try {
      for (;;) {
        const job = await api(`/api/index/jobs/${encodeURIComponent(jobId)}`);
        const p = job.progress || {};
        if (p.total > 0) {
          bar.max = p.total;
          bar.value = p.done;
        } else {
          bar.removeAttribute("value"); // indeterminate
        }
        status.textContent = `${job.status}${p.phase ? ` · ${p.phase}` : ""}${p.total ? ` ${p.done}/${p.total}` : ""}`;
        if (job.status === "done") {
          const r = job.result || {};
          const n = (k) => (Array.isArray(r[k]) ? r[k].length : r[k] || 0);
          status.textContent =
            `Done: ${n("added")} added, ${n("changed")} changed, ${n("moved")} moved, ${n("deleted")} deleted, ` +
            `${n("failed")} failed, ${n("unchanged")} unchanged; ${n("chunks_written")} chunks written, ` +
            `${n("vectors_embedded")} vectors embedded`;
          bar.max = 1;
          bar.value = 1;
          break;
        }
        if (job.status === "failed") {
          status.textContent = `Failed: ${job.error}`;
          break;
        }
        await new Promise((r) => setTimeout(r, 400));
      }
    } catch (exc) {
      status.textContent = `Lost the job: ${exc.message}`;
    } finally {
      polling = false;
      btn.disabled = false;
      loadStatus();
    }
  }

  $("#rebuild-btn").addEventListener("click", async () => {
    const status = $("#rebuild-status");
    status.textContent = "Starting…";
    try {
      const job = await api("/api/index/rebuild", { method: "POST" });
      pollJob(job.job_id);
    } catch (exc) {
      status.textContent = `Could not start: ${exc.message}`;
    }
  });
  // ---------------------------------------------------------------------------------------
  // Per-file status (GET /api/index/files), kept live by its SSE feed while the page is shown

  const fileRows = new Map(); // path -> row
  let filesFeed = null; // AbortController of the open feed
  let filesTotal = 0; // files visible to you (the table shows the first 2000 by path)

  function fileRow(f) {
    const badge = f.state === "failed" ? "error" : f.state === "embedded" ? "ok" : "";
    return el(
      "tr",
      { attrs: { "data-path": f.path } },
      el("td", {}, el("code", { text: f.path })),
      el("td", {}, el("span", { class: `badge ${badge}`.trim(), text: f.state })),
      el("td", { text: `${f.embedded_chunks}/${f.chunks}` }),
      el("td", { class: "muted", text: f.reason || "" }),
    );
  }

  function renderFiles() {
    const body = clear($("#files-table tbody"));
    const counts = {};
    for (const path of [...fileRows.keys()].sort()) {
      const f = fileRows.get(path);
      counts[f.state] = (counts[f.state] || 0) + 1;
      body.append(fileRow(f));
    }
    const parts = ["queued", "indexed", "embedded", "failed"].map((k) => `${counts[k] || 0} ${k}`);
    const shown = filesTotal > fileRows.size ? ` (the first ${fileRows.size} of ${filesTotal})` : "";
    $("#files-summary").textContent = `${fileRows.size} files${shown}: ${parts.join(", ")}`;
  }

  async function loadFiles() {
    if (filesFeed) filesFeed.abort();
    try {
      const page = await api("/api/index/files?limit=2000");
      fileRows.clear();
      filesTotal = page.total;
      for (const f of page.files) fileRows.set(f.path, f);
      renderFiles();
      $("#files-live").textContent = page.watching ? "· live (watching the vault)" : "· not watching";
      if (page.watching) followFiles();
    } catch (exc) {
      $("#files-summary").textContent = `${exc.message} (${exc.error || "error"})`;
    }
  }

  async function followFiles() {
    const feed = (filesFeed = new AbortController());
    try {
      const res = await fetch("/api/index/files/events", { headers: headers(false), signal: feed.signal });
      if (!res.ok) throw await failure(res);
      await readSSE(res, (name, data) => {
        if (currentPage !== "index") return feed.abort(); // the page was left: close the feed
        if (name === "reload") return loadFiles();
        if (name !== "files") return;
        for (const f of data.files) fileRows.set(f.path, f);
        for (const path of data.gone) fileRows.delete(path);
        renderFiles();
      });
    } catch (exc) {
      if (exc.name !== "AbortError") $("#files-live").textContent = `· feed lost: ${exc.message}`;
    }
  }

  $("#status-refresh").addEventListener("click", () => {
    loadStatus();
    loadFiles();
  });
  loaders.index = () => {
    loadStatus();
    loadFiles();
  };

  // ---------------------------------------------------------------------------------------
  // Start

  // The helpers other page scripts (evaluate.js) build on; they add their loader to `loaders`.
  window.sunlibUI = Object.freeze({ $, el, clear, api, headers, failure, readSSE, fmtMs, fmtNum, fmtTime, loaders });

  const start = location.hash.slice(1);
  currentPage = "";
  showPage(start || "ask");
  loadRuns();
  loadConversations();
  if (currentPage === "ask") question.focus();
})();
