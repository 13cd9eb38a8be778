"""The refusal gate and its signals: may the selected evidence answer the question?

``select`` keeps the passages, computes the ``GateSignals`` and asks the ``RefusalGate``
(``gate``); the signals come from the answer units (``units``), the expected answer type
(``expect``), the answer scorer (``scorer``, parameters in ``scorer.json``) and the question's
IDF-weighted terms (``relevance``); every refusal is a ``Refusal`` (``refusals``). It imports
no other part of ``answer``.
"""
