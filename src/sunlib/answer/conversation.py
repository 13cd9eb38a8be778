"""Earlier turns of a conversation: make an obvious follow-up standalone, offline, by one rule.

A chat client sends the whole conversation with every message. The pipeline answers one
question, so a follow-up such as "and its default?" or "那默认值呢？" must first name what it is
about. This is the small seam for that (a full rewrite stage, with an LLM, is later work):

    A user message is a follow-up when an earlier user message exists, the message is not
    small talk (the rule router would not send it ``direct``), and either
      (a) none of its content terms occurs in a chunk the asker may see (or it has none), or
      (b) it is short (at most ``SHORT_WORDS`` words, or ``SHORT_CJK`` CJK characters) and it
          opens with a connective ("and", "what about", "那", "还有", ...) or holds an anaphor
          ("it", "its", "that", "它", "这个", ...).
    A follow-up becomes ``"<message> (<context>)"``, where the context is the words of the
    previous user message (itself made standalone first) that carry its content terms, at
    most ``MAX_CONTEXT_WORDS`` of them.

Without earlier turns nothing is computed, so a single question runs exactly as before.

A saved conversation (``Library.ask(..., conversation_id=...)``, the store's conversations)
gives its turns back as that history: ``history_of`` reads each turn's message as the user
typed it and its answer, so the rule above sees the same turns a chat client would send.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from itertools import groupby

from ..contracts import FollowUp, Turn
from ..store import ConversationRecord
from ..text import content_terms, is_cjk
from .single.router import RuleRouter

SHORT_WORDS = 6  # "and what about its default value?" is six words; a real new question is longer
SHORT_CJK = 12  # "那它的默认值是多少呢" is ten characters
MAX_CONTEXT_WORDS = 12  # the previous question's content words, enough to name a topic
MAX_TURNS = 8  # only the last few user turns are folded in

_OPENERS = re.compile(
    r"^\s*(and|but|also|so|then|what about|how about|and what about|same for|"
    r"那|那么|还有|另外|以及|而|并且|然后)(\b|\s|(?<=[\u4e00-\u9fff]))",
    re.IGNORECASE,
)
_ANAPHORS_EN = frozenset({"it", "its", "it's", "they", "them", "their", "that", "this", "these", "those", "one"})
_ANAPHORS_ZH = ("它", "它们", "这个", "那个", "其", "该", "这些", "那些")
_WORD = re.compile(r"[\w'’]+")

Known = Callable[[Sequence[str]], bool]  # do any of these term names occur in a visible chunk?


def new_conversation_id() -> str:
    """A fresh conversation id: 64 random bits, so ids cannot be guessed or enumerated."""
    return f"conv_{secrets.token_hex(8)}"


def history_of(conversation: ConversationRecord) -> tuple[Turn, ...]:
    """A saved conversation's turns as the history of its next message: each turn's message as
    typed (not its standalone form: ``follow_up`` folds earlier follow-ups itself), then its answer."""
    turns: list[Turn] = []
    for turn in conversation.turns:
        turns.append(Turn("user", turn.said))
        answer = turn.run.frame.get("answer")
        if isinstance(answer, str) and answer:
            turns.append(Turn("assistant", answer))
    return tuple(turns)


def follow_up(message: str, history: Sequence[Turn], known: Known) -> FollowUp | None:
    """The standalone form of ``message`` after ``history``, or None when it stands on its own."""
    user = [(i, t.text.strip()) for i, t in enumerate(history) if t.role == "user" and t.text.strip()]
    user = user[-MAX_TURNS:]
    if not user:
        return None
    previous = user[0][1]
    for index, (_, text) in enumerate(user[1:], start=1):  # earlier follow-ups get their topic first
        earlier = _rewrite(text, previous, user[index - 1][0], known)
        previous = earlier.standalone if earlier is not None else text
    return _rewrite(message, previous, user[-1][0], known)


def _rewrite(message: str, previous: str, turn: int, known: Known) -> FollowUp | None:
    reason = _why_follow_up(message, known)
    if reason is None:
        return None
    context = [w for w in _content_words(previous) if w.lower() not in message.lower()]
    if not context:
        return None
    return FollowUp(message, f"{message} ({' '.join(context[:MAX_CONTEXT_WORDS])})", reason, turn)


def _why_follow_up(message: str, known: Known) -> str | None:
    if RuleRouter().decide(message).route == "direct":
        return None
    names = [t.name for t in content_terms(message)]
    if not names or not known(names):
        return "no content term of the message occurs in the notes"
    cjk = sum(1 for ch in message if is_cjk(ch))
    words = _WORD.findall(message)
    if not (cjk and cjk <= SHORT_CJK) and not (not cjk and len(words) <= SHORT_WORDS):
        return None
    if _OPENERS.match(message):
        return "a short message that opens with a connective"
    lowered = {w.lower() for w in words}
    if lowered & _ANAPHORS_EN or any(a in message for a in _ANAPHORS_ZH):
        return "a short message that refers back (an anaphor)"
    return None


def _content_words(text: str) -> list[str]:
    """The words of ``text`` that carry its content terms, as written (CJK: runs of content characters)."""
    names = {t.name for t in content_terms(text)}
    out: list[str] = []
    for word in _WORD.findall(text):
        for cjk, piece in groupby(word, is_cjk):
            chars = "".join(piece)
            if cjk:
                out.extend("".join(run) for keep, run in groupby(chars, lambda ch: ch in names) if keep)
            elif any(t.name in names for t in content_terms(chars)):
                out.append(chars)
    return list(dict.fromkeys(out))
