"""The cross-encoder reranker with a real (tiny) ONNX model and a real ``tokenizers`` file.

The model is built here with ``onnx.helper``: each token id looks up a fixed score,
the scores of the attended tokens are summed into one logit per (question, passage)
pair. Passages holding the "magic" token therefore score highest, and the expected
logits can be computed independently from the tokenizer's own encodings.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
from tokenizers.models import WordLevel

from sunlib import Library
from sunlib.contracts import Citation, Hit
from sunlib.errors import ConfigError
from sunlib.providers.rerankers.cross_encoder import CrossEncoderReranker
from sunlib.text import TermWeights
from sunlib.trace.steps import Step

MAGIC = "xylophone"
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
WORDS = [MAGIC, "install", "sunlib", "pip", "how", "do", "i", "with", "the", "a", "notes", "tuning", "search", "."]
SCORES = {MAGIC: 4.0, "install": 0.3, "sunlib": 0.2, "pip": 0.25, "notes": 0.05, "tuning": -0.5, "search": 0.1}
TYPE_WEIGHT = 0.125  # the token_type_ids variant adds this per attended passage token
QUESTION = "How do I install sunlib with pip?"


def vocab() -> dict[str, int]:
    return {tok: i for i, tok in enumerate(SPECIAL + WORDS)}


def score_table() -> np.ndarray:
    table = np.zeros(len(vocab()), dtype=np.float32)
    for word, score in SCORES.items():
        table[vocab()[word]] = score
    table[vocab()["[UNK]"]] = -0.01  # unknown words cost a little: longer passages are not favoured
    table[vocab()["[PAD]"]] = 0.7  # counts only if the attention mask is ignored
    return table


def save_tokenizer(path: Path) -> None:
    v = vocab()
    tok = Tokenizer(WordLevel(v, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", v["[CLS]"]), ("[SEP]", v["[SEP]"])],
    )
    tok.save(str(path))


def save_model(path: Path, token_type_ids: bool = False) -> None:
    """logits[b, 0] = sum_s mask[b, s] * (table[ids[b, s]] + TYPE_WEIGHT * type_ids[b, s])."""
    batch_seq = ["batch", "seq"]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, batch_seq),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, batch_seq),
    ]
    init = [
        numpy_helper.from_array(score_table(), "table"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["token_scores"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
    ]
    summed = "token_scores"
    if token_type_ids:
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, batch_seq))
        init.append(numpy_helper.from_array(np.array(TYPE_WEIGHT, dtype=np.float32), "type_weight"))
        nodes += [
            helper.make_node("Cast", ["token_type_ids"], ["types"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["types", "type_weight"], ["type_scores"]),
            helper.make_node("Add", ["token_scores", "type_scores"], ["all_scores"]),
        ]
        summed = "all_scores"
    nodes += [
        helper.make_node("Mul", [summed, "mask"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axes"], ["logits"], keepdims=1),
    ]
    output = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])
    graph = helper.make_graph(nodes, "tiny_cross_encoder", inputs, [output], initializer=init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="sunlib-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "tiny-ce"
    d.mkdir()
    save_tokenizer(d / "tokenizer.json")
    save_model(d / "model.onnx")
    return d


@pytest.fixture
def typed_model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "tiny-ce-typed"
    d.mkdir()
    save_tokenizer(d / "tokenizer.json")
    save_model(d / "model.onnx", token_type_ids=True)
    return d


def expected_logit(model_dir: Path, question: str, passage: str, token_type_ids: bool = False) -> float:
    """The model's logit computed here, from the tokenizer's own encoding of the pair."""
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    max_length = (
        json.loads((model_dir / "config.json").read_text())["max_length"]
        if (model_dir / "config.json").is_file()
        else 512
    )
    tok.enable_truncation(max_length)
    enc = tok.encode(question, passage)
    ids, mask, types = (np.array(x) for x in (enc.ids, enc.attention_mask, enc.type_ids))
    scores = score_table()[ids].astype(np.float64) + (TYPE_WEIGHT * types if token_type_ids else 0.0)
    return float((scores * mask).sum())


def make_hit(i: int, text: str) -> Hit:
    cid = f"chk_{i:016x}"
    citation = Citation(f"cit_{cid}", cid, f"note_{i}", f"n{i}.md", f"N{i}", (), 0, len(text), 1, 1, text)
    return Hit(cid, f"note_{i}", f"n{i}.md", f"N{i}", (), text, 1.0 / (i + 1), {}, citation)


PASSAGES = [
    "Tuning the notes search is a long chapter about tuning , tuning and more tuning .",
    "The search page lists notes .",
    "Install sunlib with pip .",
    f"The {MAGIC} chapter .",
    "Nothing relevant here at all , just words the model does not know .",
    f"Install sunlib with pip , then play the {MAGIC} .",
    "pip pip pip install",
]


@pytest.mark.parametrize("batch_size", [16, 3])
def test_rerank_orders_by_model_scores(model_dir: Path, batch_size: int) -> None:
    reranker = CrossEncoderReranker(model_dir, batch_size=batch_size)
    assert reranker.name == "cross-encoder" and reranker.model == "tiny-ce"
    assert reranker.inputs == {"input_ids", "attention_mask"}
    hits = [make_hit(i, p) for i, p in enumerate(PASSAGES)]

    ranked = reranker.rerank(QUESTION, hits, TermWeights({}))

    logits = {h.chunk_id: expected_logit(model_dir, QUESTION, h.text) for h in hits}
    order = sorted(logits, key=lambda c: -logits[c])
    assert [r.hit.chunk_id for r in ranked] == order
    assert ranked[0].hit.text == PASSAGES[5] and ranked[1].hit.text == PASSAGES[3]  # the magic token wins
    assert ranked[-1].hit.text == PASSAGES[0]  # negative-score tokens lose
    assert ranked[0].score == 1.0
    top_prob = 1.0 / (1.0 + np.exp(-logits[order[0]]))
    for r in ranked:
        prob = 1.0 / (1.0 + np.exp(-logits[r.hit.chunk_id]))
        assert r.details["logit"] == pytest.approx(logits[r.hit.chunk_id], abs=1e-4)
        assert r.details["probability"] == pytest.approx(prob, abs=1e-4)
        assert r.score == pytest.approx(prob / top_prob, rel=1e-5)
        assert r.hit is hits[int(r.hit.chunk_id[4:], 16)]  # hits pass through untouched
    assert all(a.score >= b.score for a, b in itertools.pairwise(ranked))
    assert reranker.rerank(QUESTION, [], TermWeights({})) == []


def test_batches_give_the_same_logits_as_one_pass(model_dir: Path) -> None:
    one = CrossEncoderReranker(model_dir, batch_size=64).scores(QUESTION, PASSAGES)
    many = CrossEncoderReranker(model_dir, batch_size=2).scores(QUESTION, PASSAGES)
    assert one.shape == (len(PASSAGES),)
    np.testing.assert_allclose(one, many, atol=1e-5)  # padding is masked out
    np.testing.assert_allclose(one, [expected_logit(model_dir, QUESTION, p) for p in PASSAGES], atol=1e-4)


def test_config_max_length_truncates(model_dir: Path, tmp_path: Path) -> None:
    passage = "the notes . " * 10 + MAGIC
    full = CrossEncoderReranker(model_dir).scores(QUESTION, [passage])[0]
    short_dir = tmp_path / "short"
    shutil.copytree(model_dir, short_dir)
    (short_dir / "config.json").write_text(json.dumps({"max_length": 16}), encoding="utf-8")
    short = CrossEncoderReranker(short_dir)
    assert short.max_length == 16
    cut = short.scores(QUESTION, [passage])[0]
    assert full == pytest.approx(expected_logit(model_dir, QUESTION, passage), abs=1e-4)
    assert cut == pytest.approx(expected_logit(short_dir, QUESTION, passage), abs=1e-4)
    assert full - cut > 3.0  # the magic token at the end was cut off


def test_token_type_ids_are_fed_when_declared(typed_model_dir: Path) -> None:
    reranker = CrossEncoderReranker(typed_model_dir, batch_size=4)
    assert reranker.inputs == {"input_ids", "attention_mask", "token_type_ids"}
    hits = [make_hit(i, p) for i, p in enumerate(PASSAGES)]

    ranked = reranker.rerank(QUESTION, hits, TermWeights({}))

    for r in ranked:
        with_types = expected_logit(typed_model_dir, QUESTION, r.hit.text, token_type_ids=True)
        without = expected_logit(typed_model_dir, QUESTION, r.hit.text)
        assert with_types - without > 0.5  # the passage segment's type ids count
        assert r.details["logit"] == pytest.approx(with_types, abs=1e-4)
    assert ranked[0].hit.text == PASSAGES[5]


def test_reranker_through_settings(vault: Path, model_dir: Path) -> None:
    (vault / "misc").mkdir()
    (vault / "misc" / "music.md").write_text(
        f"# Music room\n\nThe {MAGIC} stands in the music room next to the piano.\n\n"
        "You can install sunlib in the music room too.\n",
        encoding="utf-8",
    )
    answer = {
        "reranker": "cross-encoder",
        "reranker_model_dir": str(model_dir),
        "gate_threshold": 0.0,
        "reader_threshold": 0.0,
        "gate_threshold_bm25": 0.0,
        "answerable_threshold": 0.0,
    }
    lib = Library.open(vault, embedding={"provider": "hash"}, answer=answer)
    try:
        lib.index()
        magic = [h for h in lib.search("piano music room", mode="bm25").hits if MAGIC in h.text]
        assert magic, "the magic note was not indexed"
        result = lib.ask(QUESTION)
    finally:
        lib.close()

    (rerank,) = [s for s in result.trace.steps if s.name == Step.RERANK]
    assert rerank.status == "ok"
    assert rerank.details["reranker"] == "cross-encoder"
    assert "cross-encoder" in rerank.input_summary
    top = rerank.details["top"]
    assert top[0]["chunk_id"] == magic[0].chunk_id and top[0]["path"] == "misc/music.md"
    assert top[0]["fused_rank"] > 1  # the model, not fusion, put it first
    assert top[0]["score"] == 1.0
    assert top[0]["logit"] > 4.0 and 0.98 < top[0]["probability"] <= 1.0
    assert all(t["logit"] < top[0]["logit"] for t in top[1:])
    assert [t["rank"] for t in top] == list(range(1, len(top) + 1))
    (select,) = [s for s in result.trace.steps if s.name == Step.SELECT]
    assert select.details["selected"][0] == magic[0].chunk_id


def test_missing_directory_or_files(tmp_path: Path, model_dir: Path, vault: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigError, match=r"directory not found: .*no-such-model"):
        CrossEncoderReranker(missing)
    no_model = tmp_path / "no-model"
    shutil.copytree(model_dir, no_model)
    (no_model / "model.onnx").unlink()
    with pytest.raises(ConfigError, match=r"no-model has no model\.onnx"):
        CrossEncoderReranker(no_model)
    no_tok = tmp_path / "no-tok"
    shutil.copytree(model_dir, no_tok)
    (no_tok / "tokenizer.json").unlink()
    with pytest.raises(ConfigError, match=r"no-tok has no tokenizer\.json"):
        CrossEncoderReranker(no_tok)

    for extra in ({"reranker_model_dir": str(missing)}, {}):
        lib = Library.open(vault, embedding={"provider": "hash"}, answer={"reranker": "cross-encoder", **extra})
        try:
            expected = r"directory not found" if extra else r"needs answer\.reranker_model_dir"
            with pytest.raises(ConfigError, match=expected):
                lib.ask(QUESTION)
        finally:
            lib.close()
