"""Evaluation: BEIR-format retrieval datasets -> nDCG, recall, MRR and latency."""

from .beir import BeirDataset, load_beir
from .metrics import mrr_at_k, ndcg_at_k, recall_at_k
from .retrieval import RetrievalReport, evaluate_retrieval

__all__ = [
    "BeirDataset",
    "RetrievalReport",
    "evaluate_retrieval",
    "load_beir",
    "mrr_at_k",
    "ndcg_at_k",
    "recall_at_k",
]
