"""Term weights for a question from the index: inverse document frequency per term."""

from __future__ import annotations

import math

from ..store import SqliteStore
from ..text import TermWeights, content_terms


def term_weights(store: SqliteStore, text: str) -> TermWeights:
    """IDF weights: log(1 + (N + 1) / (df + 0.5)), so a term no chunk contains weighs the most."""
    terms = content_terms(text)
    total, df = store.doc_freqs([t.name for t in terms])
    return TermWeights({t: math.log(1.0 + (total + 1.0) / (df.get(t.name, 0) + 0.5)) for t in terms})
