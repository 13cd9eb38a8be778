"""Evaluation: BEIR retrieval (nDCG, recall, MRR), QA answers (citations, refusal), gate calibration."""

from .beir import BeirDataset, load_beir
from .metrics import mrr_at_k, ndcg_at_k, recall_at_k
from .qa import QACase, QACheck, QAReport, check_qa, evaluate_rag, load_qa, regressions
from .retrieval import RetrievalReport, evaluate_retrieval

__all__ = [
    "BeirDataset",
    "QACase",
    "QACheck",
    "QAReport",
    "RetrievalReport",
    "check_qa",
    "evaluate_rag",
    "evaluate_retrieval",
    "load_beir",
    "load_qa",
    "mrr_at_k",
    "ndcg_at_k",
    "recall_at_k",
    "regressions",
]
