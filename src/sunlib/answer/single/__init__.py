"""The single-shot path: route, retrieve, rerank, select, context, judge, write, verify, once each.

``stages`` holds the stage objects and the records that travel between them (``Question``,
``Retrieved``, ``Written``, ...), ``Chain`` and ``traced``; ``shot`` runs them in order
(``SingleShot``, ``Outcome``). Beside them: the router, the context builder, the answerability
judge, the extractive writer and the citation verifier. It imports ``answer.gate`` and
``answer.details``, never the agentic loop or ``answer``'s top.
"""
