"""Answering: route, retrieve, rerank, select + refuse, build context, write, cite + verify.

The folders read as the pipeline, each importing only those listed before it:

    details.py   the typed records every step hands to the trace (``read`` gives them back)
    gate/        the refusal gate and its signals (select, gate, scorer, units, expect, relevance, refusals)
    single/      the single-shot path: the stages, ``SingleShot``, router, context, judge, writers, verifier
    agentic/     the agentic loop and its planning, over the single shot's stage objects
    asker.py     ``Asker``: follow-ups made standalone (conversation.py), the single shot or the loop,
                 the answer frame and the saved run; ``AskResult`` (result.py)

``AskResult`` is re-exported here. ``Asker`` is imported from its module (``answer.asker``), so
that importing this package for its result type loads no writer, judge or agentic loop.
"""

from .result import AskResult

__all__ = ["AskResult"]
