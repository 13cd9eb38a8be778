"""sunlib.text: FTS tokens and queries (against a real FTS5 table), sentence spans, token estimates."""

from __future__ import annotations

import re
from collections.abc import Iterator

import apsw
import pytest

from sunlib.store import connect
from sunlib.text import estimate_tokens, fts_query, fts_tokens, is_cjk, query_terms, sentence_spans, token_weight

# --------------------------------------------------------------------------- fts_tokens


def test_english_tokens_are_lowercased_stemmed_and_stopworded() -> None:
    tokens = fts_tokens("The Running Dogs are JUMPING into the Indexes of a Library")
    assert tokens == ["run", "dog", "jump", "index", "librari"]
    # stop words vanish entirely, whatever their case
    assert fts_tokens("The AND or Not IS it a") == []


def test_stemming_makes_inflections_share_a_token() -> None:
    assert fts_tokens("chunking")[0] == fts_tokens("chunks")[0] == fts_tokens("Chunked")[0] == "chunk"


def test_cjk_run_gives_unigrams_then_adjacent_bigrams() -> None:
    assert fts_tokens("中文分词") == ["中", "文", "分", "词", "中文", "文分", "分词"]
    # a single character has no bigram
    assert fts_tokens("词") == ["词"]


def test_cjk_punctuation_and_latin_split_runs() -> None:
    # "，" ends the first run: no bigram spans it
    tokens = fts_tokens("检索，引用")
    assert "索引" not in tokens
    assert tokens == ["检", "索", "检索", "引", "用", "引用"]


def test_mixed_english_and_chinese_text() -> None:
    tokens = fts_tokens("FTS5 的分词器")
    assert tokens == ["fts5", "的", "分", "词", "器", "的分", "分词", "词器"]
    tokens = fts_tokens("sunlib使用SQLite存储")
    assert tokens[:1] == ["sunlib"]
    assert {"使用", "sqlite", "存储"} <= set(tokens)
    assert not any(re.search(r"[a-z]", t) and re.search(r"[^\x00-\x7f]", t) for t in tokens)  # never glued


def test_kana_and_extension_b_are_cjk() -> None:
    assert is_cjk("中") and is_cjk("か") and is_cjk("𠀀") and is_cjk("한")
    assert not is_cjk("a") and not is_cjk("。") and not is_cjk("😀")
    assert fts_tokens("𠀀𠀁") == ["𠀀", "𠀁", "𠀀𠀁"]


def test_query_terms_dedupes_in_first_occurrence_order() -> None:
    assert query_terms("index indexes INDEXING search index") == ["index", "search"]
    assert query_terms("分词 分词") == ["分", "词", "分词"]
    assert query_terms("the of and") == []


# --------------------------------------------------------------------------- fts_query on real FTS5

DOCS = [
    "Hybrid search fuses BM25 and dense vector results with reciprocal rank fusion.",
    "我们使用中文分词器来检索笔记，这样短词也能找到。",
    "The chunker packs whole sentences; running it twice gives the same chunks.",
    "这是一条完全不同的说明文字。",
    "Column names like col:val and NEAR(a b) are plain text here, as is a -b and ^start.",
]


@pytest.fixture
def fts() -> Iterator[apsw.Connection]:
    conn = connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(tokens, tokenize='unicode61 remove_diacritics 0')")
    for i, doc in enumerate(DOCS, start=1):
        conn.execute("INSERT INTO t(rowid, tokens) VALUES (?, ?)", (i, " ".join(fts_tokens(doc))))
    yield conn
    conn.close()


def _match(conn: apsw.Connection, query: str) -> set[int]:
    expr = fts_query(query)
    assert expr is not None, query
    return {row[0] for row in conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,))}


NASTY = [
    '"',
    '""',
    "*",
    "AND",
    "OR NOT",
    "NEAR(a b)",
    "col:val",
    "tokens:hybrid",
    "^start",
    "a -b",
    "(",
    ")",
    "'",
    "hybrid AND",
    'sear"ch*',
    "search*",
    "{tokens}: x",
    "😀",
    "😀 search 🔍",
    "!@#$%^&*()_+-=[]{};':\",./<>?\\|`~",
    "。，！？",
    "  \t\n ",
    "",
    "NOT",
    "AND OR NEAR",
    "x + y",
    "中文 OR",
    "l'index",
]


@pytest.mark.parametrize("text", NASTY)
def test_fts_query_never_produces_fts5_syntax_errors(fts: apsw.Connection, text: str) -> None:
    expr = fts_query(text)
    if expr is None:
        assert query_terms(text) == []
        return
    rows = fts.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()
    assert all(1 <= r[0] <= len(DOCS) for r in rows)
    # every term is one quoted string joined by OR: nothing else is in the expression
    assert re.fullmatch(r'"[^"]+"(?: OR "[^"]+")*', expr), expr


@pytest.mark.parametrize(
    "text", ['"', "*", "(", ")", "'", "😀", "。，！？", "!@#$%^&*()", "", "   ", "the of and", "OR NOT"]
)
def test_fts_query_is_none_without_tokens(text: str) -> None:
    assert fts_query(text) is None


def test_fts_query_syntax_words_are_plain_text(fts: apsw.Connection) -> None:
    assert fts_query("col:val") == '"col" OR "val"'
    assert fts_query("NEAR(a b)") == '"near" OR "b"'
    assert fts_query("^start") == '"start"'
    assert _match(fts, "col:val") == {5}
    assert _match(fts, "NEAR(a b)") == {5}
    assert _match(fts, "^start") == {5}
    # the raw string would be FTS5 syntax and fails: the quoted query is what makes it safe
    with pytest.raises(apsw.SQLError):
        fts.execute("SELECT rowid FROM t WHERE t MATCH ?", ("NEAR(a b",)).fetchall()


def test_chinese_word_inside_a_longer_run_is_found(fts: apsw.Connection) -> None:
    # "分词" sits inside the run "我们使用中文分词器来检索笔记"
    assert _match(fts, "分词") == {2}
    assert _match(fts, "检索") == {2}
    assert _match(fts, "分词器") == {2}


def test_single_cjk_character_query_is_found(fts: apsw.Connection) -> None:
    assert _match(fts, "词") == {2}
    assert _match(fts, "说") == {4}


def test_english_query_matches_other_inflections(fts: apsw.Connection) -> None:
    assert _match(fts, "runs") == {3}
    assert _match(fts, "Fusing") == {1}
    assert _match(fts, "sentence") == {3}
    assert _match(fts, "zzqx-qqzz") == set()


def test_emoji_in_query_is_ignored_but_words_still_match(fts: apsw.Connection) -> None:
    assert _match(fts, "😀 hybrid 🔍") == {1}


# --------------------------------------------------------------------------- sentence_spans


def _sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in sentence_spans(text)]


def test_english_sentences_end_at_punctuation_followed_by_whitespace() -> None:
    assert _sentences("Hello world. How are you? Fine!  Ok") == ["Hello world.", "How are you?", "Fine!", "Ok"]
    # no whitespace after the period: not a sentence end (decimals, file names)
    assert _sentences("Pi is 3.14 and the file is sunlib.toml. Done.") == [
        "Pi is 3.14 and the file is sunlib.toml.",
        "Done.",
    ]
    assert _sentences("Wait... what?! Really.") == ["Wait...", "what?!", "Really."]


def test_cjk_sentences_split_without_whitespace() -> None:
    assert _sentences("你好。我很好！你呢？是的；结束") == ["你好。", "我很好！", "你呢？", "是的；", "结束"]
    assert _sentences("检索笔记。Search notes. 再见！") == ["检索笔记。", "Search notes.", "再见！"]


def test_closing_quotes_and_brackets_stay_with_their_sentence() -> None:
    assert _sentences("他说：“你好。”然后走了。") == ["他说：“你好。”", "然后走了。"]
    assert _sentences("「好的。」（完）下一句。") == ["「好的。」", "（完）下一句。"]
    assert _sentences('He said "Hi." Then (he left.) Done') == ['He said "Hi."', "Then (he left.)", "Done"]
    assert _sentences("It works (mostly!) here.") == ["It works (mostly!)", "here."]


def test_list_items_table_rows_and_quotes_split_at_line_starts() -> None:
    text = "Steps follow\n- first item\n* second item\n+ third\n1. numbered one\n2) numbered two\n| a | b |\n> quoted"
    assert _sentences(text) == [
        "Steps follow",
        "- first item",
        "* second item",
        "+ third",
        "1. numbered one",
        "2) numbered two",
        "| a | b |",
        "> quoted",
    ]


def test_ordered_list_marker_is_not_a_sentence_of_its_own() -> None:
    text = "1. Writes a new snapshot.\n2. Runs the check.\n10. Deletes old ones"
    assert _sentences(text) == ["1. Writes a new snapshot.", "2. Runs the check.", "10. Deletes old ones"]


def test_blank_line_ends_a_sentence_but_a_plain_line_break_does_not() -> None:
    assert _sentences("first paragraph\n\nsecond paragraph") == ["first paragraph", "second paragraph"]
    assert _sentences("one sentence\nwrapped over lines.") == ["one sentence\nwrapped over lines."]


SPAN_TEXTS = [
    "Hello world. How are you? Fine!  Ok",
    "  leading and trailing  whitespace.   \n\n  ",
    "你好。我很好！你呢？是的；结束",
    "他说：“你好。”然后走了。 He left.\n\n- item\n- 项目。二\n\n\n",
    "😀 emoji first. 𠀀𠀁 extension B。 Done?",
    "...!!!???",
    "。。。",
    "",
    "   \n\t  ",
    "Tabs\tend. Here!\tAnd\u3000here。全角空格",
]


@pytest.mark.parametrize("text", SPAN_TEXTS)
def test_spans_are_exact_trimmed_ordered_non_empty_slices(text: str) -> None:
    spans = sentence_spans(text)
    prev_end = 0
    for s, e in spans:
        piece = text[s:e]
        assert piece, (s, e)
        assert piece == piece.strip()
        assert s >= prev_end
        prev_end = e
    # nothing but whitespace is lost between spans
    covered = "".join(text[s:e] for s, e in spans)
    assert re.sub(r"\s", "", covered) == re.sub(r"\s", "", text)


def test_whitespace_only_text_has_no_spans() -> None:
    assert sentence_spans("") == []
    assert sentence_spans("  \n\n \t ") == []


def test_spans_respect_start_and_end_bounds() -> None:
    text = "Skip me. Take this. And this! Not me."
    start, end = text.index("Take"), text.index("Not") - 1
    spans = sentence_spans(text, start, end)
    assert [text[s:e] for s, e in spans] == ["Take this.", "And this!"]
    assert all(start <= s < e <= end for s, e in spans)


# --------------------------------------------------------------------------- estimate_tokens


def test_one_token_per_cjk_character() -> None:
    assert estimate_tokens("中文分词") == 4
    assert estimate_tokens("中" * 300) == 300
    assert estimate_tokens("かなカナ한국𠀀") == 7


def test_english_words_are_counted() -> None:
    assert estimate_tokens("hello world") == 2
    assert estimate_tokens("the quick brown fox jumps") == 5
    assert estimate_tokens(" ".join(["word"] * 400)) == 400
    assert estimate_tokens("") == 0
    assert estimate_tokens("   \n ") == 0


def test_mixed_text_and_symbols() -> None:
    assert estimate_tokens("使用 sunlib 检索") == 5
    # two symbols make one token
    assert estimate_tokens("a, b.") == 3
    assert estimate_tokens("a,") == 1


def test_token_weight_is_the_unrounded_estimate_and_additive() -> None:
    texts = ["a, b.", "中文，分词。", "x", "", "(a) [b] {c}", "sunlib 的 FTS5！"]
    for t in texts:
        assert int(token_weight(t)) == estimate_tokens(t)
    # per-piece estimates round each "," down to 0; weights add up to the whole
    pieces = ["a,", " ", "b,", " ", "c,", " ", "d,"]
    whole = "".join(pieces)
    assert sum(estimate_tokens(p) for p in pieces) < estimate_tokens(whole)
    assert int(sum(token_weight(p) for p in pieces)) == estimate_tokens(whole)
