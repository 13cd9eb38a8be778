"""Small evaluation inputs the tests write: QA sets (JSONL), a tiny QA set over the sample vault, the
hash embedder's settings for it, and a tiny BEIR dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_jsonl(path: Path, rows: list[dict[str, Any] | str]) -> Path:
    path.write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows) + "\n",
        encoding="utf-8",
    )
    return path


TINY: list[dict[str, Any] | str] = [
    {
        "id": "t-en-fact",
        "lang": "en",
        "type": "fact",
        "question": "What exit status does sunlib return when I interrupt it with Ctrl-C?",
        "gold_files": ["reference/cli.md"],
        # the second phrase is in no note: keyword coverage stays below 1, which the baseline test uses
        "gold_phrases": ["Ctrl-C exits with 130", "a phrase that no note contains"],
    },
    {
        "id": "t-en-code",
        "lang": "en",
        "type": "code_identifier",
        "question": "What does the rrf_k setting control, and what is its default?",
        "gold_files": ["reference/configuration.md"],
        "gold_phrases": ["the RRF constant", "rrf_k = 60"],
    },
    {
        "id": "t-zh-code",
        "lang": "zh",
        "type": "code_identifier",
        "question": "FTS5 默认的 unicode61 分词器为什么搜不到“知识库”这样的中文词？",
        "gold_files": ["zh/指南/中文检索.md"],
        "gold_phrases": ["一整串汉字", "匹配不上"],
    },
    {
        "id": "t-en-unans",
        "lang": "en",
        "type": "unanswerable",
        "question": "Which port does sunlib's built-in web server listen on by default?",
    },
]


# The bundled gate defaults are calibrated for e5; hash cosines are far lower, so the tiny
# vault gates on term coverage alone (cosine weight 0).
HASH_TOML = (
    '[embedding]\nprovider = "hash"\n\n[answer]\ngate = "score"\ngate_cosine_weight = 0.0\ngate_threshold = 0.7\n'
)


def write_beir(root: Path) -> Path:
    corpus = [
        {"_id": "en1", "title": "Sourdough", "text": "A sourdough starter ferments flour and water with wild yeast."},
        {
            "_id": "en2",
            "title": "Bicycles",
            "text": "Check tyre pressure before a long ride; inflate to the rated PSI.",
        },
        {"_id": "en3", "title": "Tea", "text": "Green tea is steeped at lower temperatures than black tea."},
        {"_id": "zh1", "title": "熊猫", "text": "大熊猫主要以竹子为食，生活在四川的山区。"},
        {"_id": "zh2", "title": "长城", "text": "长城是中国古代修建的军事防御工程，绵延数千公里。"},
        {"_id": "zh3", "title": "茶叶", "text": "龙井茶产于杭州西湖一带，是著名的绿茶。"},
    ]
    queries = [
        {"_id": "q1", "text": "how does a sourdough starter ferment"},
        {"_id": "q2", "text": "tyre pressure for a ride"},
        {"_id": "q3", "text": "大熊猫吃什么"},
        {"_id": "q4", "text": "龙井茶产自哪里"},
        {"_id": "q5", "text": "unjudged query is ignored"},
    ]
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(c, ensure_ascii=False) for c in corpus), encoding="utf-8")
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in queries), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\ten1\t1\nq2\ten2\t1\nq3\tzh1\t1\nq4\tzh3\t2\n", encoding="utf-8"
    )
    return root
