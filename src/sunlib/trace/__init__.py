"""Tracing a run: the step recorder every stage runs through (``recorder``) and the one registry of
the steps' names (``steps``)."""

from .recorder import FLAT, OMIT, Listener, Status, StepRecorder, Tracer, as_details, read_details
from .steps import ASK_STEPS, RETRIEVAL_STEPS, Step, describe

__all__ = [
    "ASK_STEPS",
    "FLAT",
    "OMIT",
    "RETRIEVAL_STEPS",
    "Listener",
    "Status",
    "Step",
    "StepRecorder",
    "Tracer",
    "as_details",
    "describe",
    "read_details",
]
