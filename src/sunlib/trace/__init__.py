"""Tracing a run: the step recorder every stage runs through (``recorder``) and the one registry of
the steps' names (``steps``)."""

from .recorder import Listener, Status, StepRecorder, Tracer
from .steps import ASK_STEPS, RETRIEVAL_STEPS, Step, describe

__all__ = ["ASK_STEPS", "RETRIEVAL_STEPS", "Listener", "Status", "Step", "StepRecorder", "Tracer", "describe"]
