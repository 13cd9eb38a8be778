"""The agentic loop and its planning, over the single-shot path's own stage objects.

``loop`` is the state machine (``AgenticLoop``, ``TRANSITIONS``); ``rewrite`` gives a question's
other forms, ``decompose`` its sub-questions, ``plan_rules`` and ``plan_stage`` each part's
queries, routes and filters. It imports ``answer.single``, ``answer.gate`` and ``answer.details``.
"""
