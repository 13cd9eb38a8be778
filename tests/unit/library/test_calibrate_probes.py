"""Self-calibration (``sunlib calibrate``): probes written from the vault, the fit, the stored
threshold in the gate and in status, and the command's errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from sunlib import Library
from sunlib.answer.gate.gate import AcrossLanguages, LearnedGate, RefusalGate, build_gate, profile_for, selfcal_key
from sunlib.answer.gate.scorer import load_params
from sunlib.library.calibration import MAX_SHIFT, MIN_PER_CLASS, ProbeResult, best_threshold, choose, rates
from sunlib.library.probes import (
    Probe,
    Vocabulary,
    heading_probe,
    make_probes,
    swap_probe,
    value_probes,
)
from sunlib.store import ChunkRow
from sunlib.text import fts_tokens
from sunlib.text.terms import fold
from tests.support.clients import sunlib

PARAMS = load_params()
HASH = {
    "SUNLIB_EMBEDDING__PROVIDER": "hash",
    "SUNLIB_ANSWER__GATE": "learned",
    "COLUMNS": "400",
}  # the CLI on the hash-indexed vault, lines unwrapped
pytestmark = pytest.mark.skipif(PARAMS is None, reason="no shipped scorer parameters")


def _vault_text(vault: Path) -> str:
    return "\n".join(fold(p.read_text(encoding="utf-8")).lower() for p in sorted(vault.rglob("*.md")))


def _space(lib: Library) -> str:
    return lib.space.name


# -- probes -------------------------------------------------------------------------------------


def test_headings_and_sentences_become_questions_in_their_language() -> None:
    assert heading_probe("Configure the server") == "How do I configure the server?"
    assert heading_probe("Installing packages") == "How do I go about installing packages?"
    assert heading_probe("Search the vault") == "How do I search the vault?"
    assert heading_probe("Search modes") == "What are Search modes?"
    assert heading_probe("Hybrid search") == "What is Hybrid search?"
    assert heading_probe("混合搜索") == "混合搜索是什么？"
    assert heading_probe("安装依赖") == "如何安装依赖？"
    assert heading_probe("如何恢复文件？") == "如何恢复文件？"
    assert heading_probe("Overview") is None
    assert heading_probe("概述") is None
    assert value_probes("The default port of the local server is 8765 on every machine.") == [
        "The default port of the local server is how many?"
    ]
    assert value_probes("The 1973 oil crisis began in October 1973 when the embargo started.") == [
        "The 1973 oil crisis began in which year?"
    ]
    assert value_probes("Sunlib is a local-first knowledge library for notes.") == ["What is Sunlib?"]
    assert value_probes("本作中共有20张战场地图。") == ["本作中共有多少张战场地图？"]
    assert value_probes("It was sunny.") == []


def _row(text: str, title: str = "Note", heading: tuple[str, ...] = ()) -> ChunkRow:
    return ChunkRow("c", 0, heading, text, 0, len(text), 1, 1, "n", "n.md", title, ())


def test_vocabulary_knows_tokens_and_substrings() -> None:
    vocab = Vocabulary([_row("Hybrid search fuses BM25 and dense hits. 混合搜索很快。", "Search", ("Fusion",))])
    assert vocab.mentions("searching")  # the same stem
    assert vocab.mentions("Fusion") and vocab.mentions("混合搜索")
    assert not vocab.mentions("glacier")
    assert not vocab.mentions("搜混")  # CJK: only the whole term counts
    assert vocab.number_taken("25") is False and vocab.df["bm25"] == 1


def test_swap_keeps_the_frame_and_puts_in_an_unseen_term() -> None:
    vocab = Vocabulary([_row("The index keeps vectors for every chunk. The 2024 release added HNSW.")])
    rng = random.Random(0)
    swapped = swap_probe(Probe("What does the index keep for every chunk?", True, "heading", "en", "n.md"), vocab, rng)
    assert swapped is not None and not swapped.answerable
    assert swapped.replaced in ("index", "keep", "chunk") and swapped.swapped is not None
    assert not vocab.mentions(swapped.swapped)
    assert swapped.question == "What does the index keep for every chunk?".replace(swapped.replaced, swapped.swapped)
    number = swap_probe(Probe("What did the 2024 release add?", True, "value", "en", "n.md"), vocab, rng)
    assert number is not None and number.kind == "swap-number" and number.replaced == "2024"
    assert number.swapped != "2024" and number.swapped not in vocab.text


def test_probes_are_deterministic_spread_and_balanced(hash_library: Library) -> None:
    principals = hash_library.settings.search.principals
    first = make_probes(hash_library.store, principals, 60, seed=3)
    again = make_probes(hash_library.store, principals, 60, seed=3)
    other = make_probes(hash_library.store, principals, 60, seed=4)
    assert first.probes == again.probes
    assert first.probes != other.probes
    assert len(first.answerable) == 30
    assert len(first.unanswerable) >= MIN_PER_CLASS
    assert first.notes >= 15  # one probe per note per round: spread over the vault
    kinds = {p.kind for p in first.answerable}
    assert "heading" in kinds and kinds & {"value", "definition"}
    assert {p.lang for p in first.probes} == {"en", "zh"}
    hidden = {"internal/ops-runbook.md", "internal/roadmap-draft.md"}  # not visible to "public"
    assert not {p.source for p in first.probes} & hidden


def test_swapped_terms_never_occur_in_the_vault(hash_library: Library) -> None:
    probes = make_probes(hash_library.store, hash_library.settings.search.principals, 80, seed=0)
    text = _vault_text(hash_library.vault)
    visibility_all = ("public", "ops", "team")
    from sunlib.store import Visibility

    asked = {p.question for p in probes.answerable}
    for p in probes.unanswerable:
        assert p.swapped and p.replaced
        assert fold(p.swapped).lower() not in text, p
        if not any("\u4e00" <= ch <= "\u9fff" for ch in p.swapped):
            tokens = fts_tokens(p.swapped)
            _, found = hash_library.store.lexical.doc_freqs(tokens, Visibility.of(visibility_all))
            assert not found, (p, found)
        assert fold(p.replaced).lower() in text  # the term taken out was the vault's own
        original = p.question.replace(p.swapped, p.replaced, 1)
        assert original in asked or original[0].lower() + original[1:] in {q[0].lower() + q[1:] for q in asked}


# -- the fit ------------------------------------------------------------------------------------


def _results(ans: list[float], unans: list[float], hard: int = 0) -> list[ProbeResult]:
    out = [ProbeResult(Probe(f"a{i}", True, "heading", "en", "x"), p, False, ()) for i, p in enumerate(ans)]
    out += [ProbeResult(Probe(f"u{i}", False, "swap-term", "en", "x"), p, False, ()) for i, p in enumerate(unans)]
    out += [
        ProbeResult(Probe(f"h{i}", False, "swap-term", "en", "x"), 0.99, True, ("missing_name",)) for i in range(hard)
    ]
    return out


def test_fit_moves_part_way_towards_the_probes_best_and_no_further_than_the_band() -> None:
    results = _results([0.6, 0.7, 0.8, 0.9], [0.1, 0.2, 0.3, 0.4])
    assert rates(results, 0.5).balanced_accuracy == 1.0
    optimum, at = best_threshold(results, 0.5)
    assert optimum == 0.5 and at.balanced_accuracy == 1.0  # the shipped threshold already separates them
    assert choose(0.5, optimum, 0.0) == 0.5
    optimum, at = best_threshold(results, 0.95)  # a shipped threshold far too strict for this vault
    assert 0.4 < optimum < 0.6 and at.balanced_accuracy == 1.0
    gain = at.balanced_accuracy - rates(results, 0.95).balanced_accuracy
    assert gain == 0.5
    assert choose(0.95, optimum, gain) == round(0.95 - MAX_SHIFT, 4)  # half-way is 0.725: clamped
    assert choose(0.6, 0.5, 0.2) == 0.55  # half-way
    assert choose(0.6, 0.5, 0.01) == 0.6  # too little gain: the shipped threshold stays


def test_refused_anyway_counts_at_every_threshold() -> None:
    results = _results([0.9], [0.1], hard=2)
    assert rates(results, 0.0).refusal_rate == pytest.approx(2 / 3)
    assert rates(results, 0.5).refusal_rate == 1.0


# -- the stored threshold -----------------------------------------------------------------------


def _store(lib: Library, threshold: float, scorer: str | None = None) -> None:
    assert PARAMS is not None
    record = {
        "threshold": threshold,
        "shipped_threshold": PARAMS.threshold,
        "probes": {"answerable": 30, "unanswerable": 30, "notes": 20, "seed": 0},
        "before": {"refusal_rate": 0.5, "false_refusal_rate": 0.1, "balanced_accuracy": 0.7},
        "after": {"refusal_rate": 0.6, "false_refusal_rate": 0.1, "balanced_accuracy": 0.75},
        "calibrated_at": "2026-01-02T03:04:05+00:00",
        "scorer": PARAMS.fingerprint if scorer is None else scorer,
        "cosine_features": True,
    }
    lib.store.set_meta(selfcal_key(_space(lib)), json.dumps(record))


def _learned(gate: RefusalGate) -> LearnedGate:
    """The learned gate inside the one built (the reader may overrule it across languages)."""
    assert isinstance(gate, AcrossLanguages) and isinstance(gate.inner, LearnedGate)
    return gate.inner


def _gate(lib: Library) -> LearnedGate:
    s = lib.settings
    return _learned(build_gate(s.answer, profile_for(s.embedding.provider), lib.store, _space(lib), "en"))


def test_gate_priority_settings_then_calibration_then_shipped(hash_library: Library) -> None:
    hash_library = hash_library.with_settings(answer={"gate": "learned"})  # the self-calibrated gate
    assert PARAMS is not None
    assert _gate(hash_library).threshold == PARAMS.threshold
    assert hash_library.calibration().state == "uncalibrated"
    _store(hash_library, 0.777)
    gate = _gate(hash_library)
    assert gate.threshold == 0.777 and "self-calibrated 2026-01-02" in gate.source and "60 probes" in gate.source
    result = hash_library.ask("How does hybrid search combine BM25 and dense results?", save=False)
    assert result.selection is not None and result.selection.threshold == 0.777
    explicit = hash_library.with_settings(answer={"answerable_threshold": 0.3})
    assert _gate(explicit).threshold == 0.3 and _gate(explicit).source.endswith("settings")
    assert explicit.calibration().state == "settings"
    other_space = _learned(
        build_gate(hash_library.settings.answer, profile_for("hash"), hash_library.store, "other", "en")
    )
    assert other_space.threshold == PARAMS.threshold
    _store(hash_library, 0.777, scorer="another-scorer")  # made with other parameters: ignored
    assert _gate(hash_library).threshold == PARAMS.threshold
    assert hash_library.calibration().state == "stale"


def test_status_shows_the_calibration(hash_library: Library) -> None:
    vault = str(hash_library.vault)
    r = sunlib("status", "--vault", vault, "--json", env=HASH)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["calibration"]["state"] == "uncalibrated"
    assert "uncalibrated" in sunlib("status", "--vault", vault, env=HASH).stdout
    _store(hash_library, 0.6123)
    r = sunlib("status", "--vault", vault, env=HASH)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("gate"))
    assert "threshold 0.6123" in line and "self-calibrated 2026-01-02" in line
    info = json.loads(sunlib("status", "--vault", vault, "--json", env=HASH).stdout)["calibration"]
    assert info["state"] == "calibrated" and info["threshold"] == 0.6123 and info["stored"]["probes"]["seed"] == 0


def test_calibrate_command_stores_what_it_reports(hash_library: Library) -> None:
    hash_library = hash_library.with_settings(answer={"gate": "learned"})
    vault = str(hash_library.vault)
    dry = sunlib("calibrate", "--vault", vault, "--probes", "30", "--dry-run", "--json", env=HASH)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["stored"] is False
    assert hash_library.calibration().state == "uncalibrated"
    r = sunlib("calibrate", "--vault", vault, "--probes", "30", "--json", env=HASH)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["key"] == selfcal_key(_space(hash_library)) and report["stored"] is True
    assert report["probes"]["answerable"] + report["probes"]["unanswerable"] == len(report["probe_questions"])
    assert abs(report["threshold"] - report["shipped_threshold"]) <= MAX_SHIFT + 1e-9
    assert [q["question"] for q in report["probe_questions"]] == [
        q["question"] for q in json.loads(dry.stdout)["probe_questions"]
    ]  # the same probes: seeded
    stored = json.loads(hash_library.store.get_meta(report["key"]) or "{}")
    assert stored["threshold"] == report["threshold"] and stored["before"] == report["before"]
    cal = hash_library.calibration()
    assert cal.state == "calibrated" and cal.threshold == report["threshold"]
    text = sunlib("calibrate", "--vault", vault, "--probes", "30", env=HASH)
    assert text.returncode == 0 and "stored selfcal:" in text.stdout
    reset = sunlib("calibrate", "--vault", vault, "--reset", env=HASH)
    assert reset.returncode == 0 and hash_library.calibration().state == "uncalibrated"


def test_index_self_calibrates_when_asked(hash_vault: Path) -> None:
    env = {"SUNLIB_ANSWER__SELF_CALIBRATE": "true", "SUNLIB_ANSWER__GATE": "learned"}
    r = sunlib("index", str(hash_vault), "--provider", "hash", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert "threshold" in json.loads(r.stdout)["calibration"]  # no valid calibration yet: made one
    again = sunlib("index", str(hash_vault), "--provider", "hash", "--json", env=env)
    assert json.loads(again.stdout)["calibration"] is None  # nothing changed: kept
    off = sunlib("index", str(hash_vault), "--provider", "hash", "--json", env={"SUNLIB_ANSWER__GATE": "learned"})
    assert json.loads(off.stdout)["calibration"] is None
    with Library.open(hash_vault, embedding={"provider": "hash"}, answer={"gate": "learned"}) as lib:
        assert lib.calibration().state == "calibrated"


# -- bad input ----------------------------------------------------------------------------------


def _one_line_error(r: object, *needles: str) -> None:
    code, err = r.returncode, r.stderr  # type: ignore[attr-defined]
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], err


def test_bad_input_is_one_line_and_non_zero(hash_vault: Path, tmp_path: Path) -> None:
    env = {"SUNLIB_EMBEDDING__PROVIDER": "hash", "SUNLIB_ANSWER__GATE": "learned"}
    _one_line_error(sunlib("calibrate", "--vault", str(hash_vault), "--probes", "5", env=env), "--probes", "5")
    _one_line_error(sunlib("calibrate", "--vault", str(hash_vault), "--probes", "99999", env=env), "--probes")
    _one_line_error(sunlib("calibrate", "--vault", str(tmp_path / "nowhere"), env=env), "vault folder not found")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "a.md").write_text("# A\n\nText.\n", encoding="utf-8")
    _one_line_error(sunlib("calibrate", "--vault", str(bare), env=env), "no index yet")
    assert sunlib("index", str(bare), "--provider", "hash", "-q").returncode == 0
    _one_line_error(sunlib("calibrate", "--vault", str(bare), env=env), "too few probe questions")
    _one_line_error(
        sunlib("calibrate", "--vault", str(hash_vault), "--config", str(tmp_path / "none.toml"), env=env),
        "config file not found",
    )
    score = {**env, "SUNLIB_ANSWER__GATE": "score"}
    _one_line_error(sunlib("calibrate", "--vault", str(hash_vault), env=score), "learned gate")
