"""A cross-encoder reranker loaded from a local directory (nothing is downloaded).

The directory holds ``model.onnx`` and ``tokenizer.json`` (a Hugging Face
``tokenizers`` file), plus an optional ``config.json`` with ``max_length``.
The model takes ``input_ids`` and ``attention_mask`` (and ``token_type_ids``
when it declares them) for (question, passage) pairs and returns one logit per
pair, as ms-marco-style cross-encoders exported to ONNX do. Needs the
``minilm`` extra (onnxruntime, tokenizers).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...config import AnswerSettings
from ...contracts import Hit, Ranked
from ...errors import ConfigError
from ...text import TermWeights
from ..base import Reranker


class CrossEncoderReranker(Reranker):
    name = "cross-encoder"

    def __init__(self, model_dir: Path, threads: int = 1, batch_size: int = 16) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError:
            raise ConfigError(
                "the cross-encoder reranker needs onnxruntime and tokenizers: pip install 'sunlib[minilm]'"
            ) from None
        if not model_dir.is_dir():
            raise ConfigError(f"cross-encoder directory not found: {model_dir}")
        model, tok = model_dir / "model.onnx", model_dir / "tokenizer.json"
        for path in (model, tok):
            if not path.is_file():
                raise ConfigError(f"cross-encoder directory {model_dir} has no {path.name}")
        config_path = model_dir / "config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        self.max_length = int(config.get("max_length", 512))
        self.tokenizer = Tokenizer.from_file(str(tok))
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.enable_padding()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.batch_size = batch_size
        self.model = model_dir.name

    def scores(self, question: str, passages: Sequence[str]) -> np.ndarray:
        out: list[np.ndarray] = []
        for i in range(0, len(passages), self.batch_size):
            batch = self.tokenizer.encode_batch([(question, p) for p in passages[i : i + self.batch_size]])
            feed = {
                "input_ids": np.array([e.ids for e in batch], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in batch], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in batch], dtype=np.int64),
            }
            logits = self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[0]
            out.append(np.asarray(logits, dtype=np.float64).reshape(len(batch), -1)[:, 0])
        return np.concatenate(out) if out else np.zeros(0)

    def rerank(self, question: str, hits: Sequence[Hit], term_weights: TermWeights) -> list[Ranked]:
        if not hits:
            return []
        logits = self.scores(question, [h.text for h in hits])
        probs = 1.0 / (1.0 + np.exp(-logits))
        top = float(probs.max()) or 1.0
        ranked = [
            Ranked(h, float(p) / top, {"logit": round(float(lg), 4), "probability": round(float(p), 4)})
            for h, p, lg in zip(hits, probs, logits, strict=True)
        ]
        ranked.sort(key=lambda r: (-r.score, r.hit.chunk_id))
        return ranked


def create_cross_encoder(settings: AnswerSettings) -> Reranker:
    if settings.reranker_model_dir is None:
        raise ConfigError("the cross-encoder reranker needs answer.reranker_model_dir (a folder with model.onnx)")
    return CrossEncoderReranker(Path(settings.reranker_model_dir).expanduser())
