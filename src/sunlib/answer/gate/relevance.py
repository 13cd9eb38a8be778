"""Term weights for a question from the index: inverse document frequency per term."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...store import Store, Visibility
from ...text import TermWeights, content_terms


def term_weights(store: Store, text: str, principals: Sequence[str]) -> TermWeights:
    """IDF weights over the chunks the principals may see: log(1 + (N + 1) / (df + 0.5)), so a
    term no visible chunk contains weighs the most (whether or not a hidden note has it)."""
    terms = content_terms(text)
    total, df = store.lexical.doc_freqs([t.name for t in terms], Visibility.of(principals))
    return TermWeights({t: math.log(1.0 + (total + 1.0) / (df.get(t.name, 0) + 0.5)) for t in terms})
