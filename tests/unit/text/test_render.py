"""sunlib.text.render: Markdown/Obsidian syntax as its reader sees it, in answers and in verification."""

from __future__ import annotations

import re

import pytest

from sunlib.answer.single.citations import verify
from sunlib.answer.single.extractive import ExtractiveWriter
from sunlib.contracts import BuiltContext, Evidence
from sunlib.providers.base import WriteRequest
from sunlib.text import TermWeights
from sunlib.text.refs import REF
from sunlib.text.render import render_markdown, render_wikilink
from sunlib.text.sentences import clean_sentence, quotable_sentences
from tests.support.paths import ROOT

SAMPLE_VAULT = ROOT / "src" / "sunlib" / "sample_vault"


@pytest.mark.parametrize(
    ("markdown", "shown"),
    [
        # wikilinks and embeds
        ("See [[Note]] first.", "See Note first."),
        ("See [[Note|the alias]] first.", "See the alias first."),
        ("See [[Note#Heading]] first.", "See Note > Heading first."),
        ("See [[#Heading]] first.", "See Heading first."),
        ("See [[folder/Note#Part#Sub part]].", "See folder/Note > Part > Sub part."),
        ("See [[Note#^block-id]].", "See Note."),
        ("See [[Note#Heading|alias]].", "See alias."),
        ("A picture ![[diagram.png]] here.", "A picture here."),
        ("Slides ![[talk.pdf#page=3]].", "Slides."),
        ("Embedded ![[Other note#Part]] here.", "Embedded Other note > Part here."),
        ("Embedded ![[Release v1.2]] here.", "Embedded Release v1.2 here."),
        ("| [[Note\\|alias]] | b |", "| alias | b |"),  # the escaped pipe of a table cell
        # Markdown links and images
        ("Read [the docs](https://a.b/docs#setup).", "Read the docs."),
        ('Read [the docs](<a b.md> "Title") now.', "Read the docs now."),
        ("Read [Foo](https://en.wikipedia.org/wiki/Foo_(bar)) now.", "Read Foo now."),
        ("Read [the **docs**][docs] now.", "Read the docs now."),
        ("A cat: ![a grey cat](cat.png).", "A cat: a grey cat."),
        ("An icon ![](icon.svg) here.", "An icon here."),
        ("Mail <me@example.org> or see <https://a.b/#frag>.", "Mail me@example.org or see https://a.b/#frag."),
        # emphasis
        ("It is **bold**, __Strong__, *em*, _em2_, ~~gone~~, ==hi==.", "It is bold, Strong, em, em2, gone, hi."),
        ("***Both*** and **a _nested_ one**.", "Both and a nested one."),
        ("这是**重要**的。", "这是重要的。"),
        ("\\*not em\\* and \\[[not a link]].", "*not em* and [[not a link]]."),
        # HTML, comments, entities
        ("Press <kbd>Ctrl</kbd>+<kbd>C</kbd> to stop.", "Press Ctrl+C to stop."),
        ("One<br>two <br/> three.", "One two three."),
        ("A <span class='x'>styled</span> word &amp; more&nbsp;text.", "A styled word & more\u00a0text."),
        ("Hidden <!-- a comment --> and %%an Obsidian comment%%.", "Hidden and."),
        # footnotes, block ids, task boxes
        ("A claim[^1] with a note ^abc123", "A claim with a note"),
        ("- [x] done\n- [ ] open", "- done\n- open"),
        # block structure is kept, the inline syntax inside it is not
        ("# Title\n\n- item **one**\n1. item two", "# Title\n\n- item one\n1. item two"),
    ],
)
def test_render_shows_what_the_reader_sees(markdown: str, shown: str) -> None:
    assert render_markdown(markdown) == shown


@pytest.mark.parametrize(
    "markdown",
    [
        "A __lowercase__ word between double underscores reads as a dunder name.",
        "Keep snake_case_name, my_var_ and __init__ as they are.",
        "Math: x**2 + y**2, 2*3*4 and a==b stay.",
        "Spaced * stars * and == signs == stay.",
        "A URL https://a.b/x_y_z_w and www.a.b/_p_ keeps underscores.",
        "A List<String> is not HTML, nor is a < b > c.",
        "> a plain quote",
        "# A heading\n\n- a list item\n| a | table |",
    ],
)
def test_what_only_looks_like_markup_is_kept(markdown: str) -> None:
    assert render_markdown(markdown) == markdown


@pytest.mark.parametrize(
    ("markdown", "shown"),
    [
        ("> [!note] Read this\n> Body of the note.", "Read this:\nBody of the note."),
        ("> [!tip]- Folded tip\n> Folded body.", "Folded tip:\nFolded body."),
        ("> [!WARNING]+ Careful!\n> Body.", "Careful!\nBody."),  # the title ends in punctuation
        ("> [!info] **Bold** title\n> Body.", "Bold title:\nBody."),
        ("> [!note]\n> Only the content.", "Only the content."),
        ("> [!注意] 中文标题\n> 内容是**重要**的。", "中文标题：\n内容是重要的。"),
        ("> [!note] Outer\n> text\n> > quoted inside\nafter", "Outer:\ntext\n> quoted inside\nafter"),
        ("> [!note] Outer\n> > [!tip] Inner\n> > inner text\n> outer text", "Outer:\nInner:\ninner text\nouter text"),
    ],
)
def test_callouts_become_their_title_and_content(markdown: str, shown: str) -> None:
    assert render_markdown(markdown) == shown


def test_code_keeps_its_markup() -> None:
    inline = "Run `**not bold** [[x]] [a](b)` and ``a ` b`` here."
    assert render_markdown(inline) == inline
    fenced = "**before**\n```python\n**kwargs and [[x]] and <kbd>k</kbd>\n> [!note] not a callout\n```\n**after**"
    assert render_markdown(fenced) == (
        "before\n```python\n**kwargs and [[x]] and <kbd>k</kbd>\n> [!note] not a callout\n```\nafter"
    )
    tilde = "~~~\n__init__ ==x==\n~~~"
    assert render_markdown(tilde) == tilde
    in_callout = "> [!example] Code\n> ```python\n> f(**kwargs, x=[[y]])\n> ```\n> After **it**."
    assert render_markdown(in_callout) == "Code:\n```python\nf(**kwargs, x=[[y]])\n```\nAfter it."


def test_render_wikilink_parts() -> None:
    assert render_wikilink("Note") == "Note"
    assert render_wikilink("Note#H1#H2") == "Note > H1 > H2"
    assert render_wikilink("#Only heading") == "Only heading"
    assert render_wikilink("Note|  alias ") == "alias"
    assert render_wikilink("image.png", embed=True) == ""
    assert render_wikilink("image.png") == "image.png"  # a link to an attachment still names it
    assert render_wikilink("Note", embed=True) == "Note"


def test_render_never_uncovers_a_ref_marker() -> None:
    for text in ("\\[ref:chk_fake\\] says so.", "<b>[ref:</b>chk_fake] says so.", "[[ref:chk_fake]] says so."):
        rendered = render_markdown(text)
        assert REF.findall(rendered) == [], rendered
        assert REF.findall(clean_sentence(text)) == []
    assert "[ref" in clean_sentence("\\[ref:chk_fake\\] says so.")  # defused, not deleted


def test_text_that_only_looks_like_a_placeholder_survives() -> None:
    text = "Private use \ue000 0 \ue001 and \ue002 and \ue003 chars, with **bold**."
    assert render_markdown(text) == "Private use \ue000 0 \ue001 and \ue002 and \ue003 chars, with bold."


# -------------------------------------------------------------------------- clean_sentence


@pytest.mark.parametrize(
    ("sentence", "clean"),
    [
        ("- See [[guide/setup#Install|the install guide]] for **details**.", "See the install guide for details."),
        ("> [!tip] Keep notes short", "Keep notes short:"),
        ("> [!tip]\n> Keep notes **short** and linked.", "Keep notes short and linked."),
        ("## [[Note]] heading", "Note heading"),
        ("| [[A\\|alias]] | <kbd>Ctrl</kbd> |", "alias | Ctrl"),
        ("1. Press <kbd>Ctrl</kbd>+<kbd>C</kbd>\n   to stop the run.", "Press Ctrl+C to stop the run."),
    ],
)
def test_clean_sentence_renders_then_strips_block_markers(sentence: str, clean: str) -> None:
    assert clean_sentence(sentence) == clean


_RAW_SYNTAX = re.compile(r"\[\[|\]\]|\]\(|\*\*|__\w|\[!\w+\]|<kbd>|<br|==\w")


def _outside_code(text: str) -> str:
    return re.sub(r"(`+).+?\1", " ", text)


def test_no_quotable_sentence_of_the_sample_vault_shows_raw_syntax() -> None:
    notes = sorted(SAMPLE_VAULT.rglob("*.md"))
    raw_before = sum(bool(_RAW_SYNTAX.search(_outside_code(n.read_text(encoding="utf-8")))) for n in notes)
    assert raw_before >= 10  # the vault does use the syntax, so the check below means something
    for note in notes:
        for _, sentence in quotable_sentences(note.read_text(encoding="utf-8")):
            if sentence.startswith(("```", "~~~")):
                continue
            assert not _RAW_SYNTAX.search(_outside_code(sentence)), (note.name, sentence)


# -------------------------------------------------------------------------- verification


def _ev(chunk_id: str, text: str) -> Evidence:
    return Evidence(0, chunk_id, "n1", "n1.md", "n1", ("A",), text, 1.0, 0, len(text), 1, 1, 0)


def test_verify_accepts_a_quote_in_rendered_form() -> None:
    evidence = [
        _ev("chk_en", "> [!tip] Setup\n> Run the **index** command, as [[guide/setup#Install|the guide]] says."),
        # markup splits the Han run: raw text has no bigram across "**红**", the rendered text has them all
        _ev("chk_zh", "在设置里选择**红**色。"),
    ]
    answer = "Run the index command, as the guide says [ref:chk_en]. 选择红色。[ref:chk_zh]"
    result = verify(answer, evidence)
    assert [s.supported for s in result.sentences] == [True, True]
    assert result.unsupported == 0
    # the citation still points at the note text as written
    zh = next(c for c in result.citations if c.chunk_id == "chk_zh")
    assert zh.quote == "在设置里选择**红**色。"


def test_verify_still_catches_claims_the_evidence_does_not_make() -> None:
    evidence = [_ev("chk_a", "Run the **index** command, as [[guide/setup#Install|the guide]] says.")]
    answer = (
        "Bananas are yellow and grow in tropical countries [ref:chk_a]. "
        # a link target in the claim counts: its words are not in the evidence
        "Run the [index command](https://evil.example/steal-credentials-now) [ref:chk_a]. "
        "选择绿色的香蕉。[ref:chk_a]"
    )
    result = verify(answer, evidence)
    assert [s.supported for s in result.sentences] == [False, False, False]
    assert result.unsupported == 3 and result.citations == ()


def test_the_extractive_writer_quotes_rendered_sentences_that_verify() -> None:
    text = (
        "> [!tip] A good habit\n"
        "> Run `sunlib index` after **every** edit; see [[guide/indexing#Incremental runs|incremental runs]].\n\n"
        "Press <kbd>Ctrl</kbd>+<kbd>C</kbd> to stop a running index, as the [CLI page](reference/cli.md#index) says."
    )
    evidence = (_ev("chk_t", text),)
    question = "How do I keep the index fresh and stop a running index?"
    context = BuiltContext(evidence=evidence, text="", token_estimate=0, fence="")
    draft = ExtractiveWriter(None).write(WriteRequest(question, context, TermWeights.uniform(question), "", 2))
    assert "Run `sunlib index` after every edit; see incremental runs. [ref:chk_t]" in draft.text
    assert "Press Ctrl+C to stop a running index, as the CLI page says. [ref:chk_t]" in draft.text
    assert not _RAW_SYNTAX.search(_outside_code(draft.text))
    result = verify(draft.text, evidence)
    assert result.sentences and all(s.supported for s in result.sentences)


@pytest.mark.parametrize(
    ("text", "reads"),
    [
        (
            "::: tip Use a venv\nInstall it in a virtual environment.\n:::\n",
            "Use a venv: Install it in a virtual environment.",
        ),
        (":::warning\nNever run it as root.\n:::", "Never run it as root."),
        (":::note[第一步]\n先安装依赖。\n:::", "第一步： 先安装依赖。"),
        ('!!! note "Why"\n    Because it is faster.\n', "Why: Because it is faster."),
        ("??? tip\n    Collapsed by default.\n", "Collapsed by default."),
        ("> [!note] Heads up\n> The index lives outside the vault.", "Heads up: The index lives outside the vault."),
    ],
)
def test_docs_site_containers_read_as_titled_blocks(text: str, reads: str) -> None:
    """VitePress / Docusaurus / MkDocs containers never show their markers."""
    assert clean_sentence(text) == reads
    assert ":::" not in render_markdown(text) and "!!!" not in render_markdown(text)


def test_a_code_fence_inside_a_container_stays_code() -> None:
    assert render_markdown("::: details\n```py\nx = a ::: b\n```\n:::\n") == "```py\nx = a ::: b\n```\n"
