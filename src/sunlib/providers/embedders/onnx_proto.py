"""The few ONNX protobuf messages a graph of plain tensors and nodes needs, written by hand.

``onnxruntime`` runs a model from its serialised bytes; building those bytes with the ``onnx``
package would make it (and protobuf) a run-time dependency for about a hundred lines of
encoding. Field numbers are those of ``onnx/onnx.proto3`` (IR version 9):

=================  ==================================================================
message            fields written here
=================  ==================================================================
ModelProto         ir_version 1, producer_name 2, graph 7, opset_import 8
OperatorSetIdProto domain 1, version 2
GraphProto         node 1, name 2, initializer 5, input 11, output 12
NodeProto          input 1, output 2, name 3, op_type 4, attribute 5, domain 7
AttributeProto     name 1, f 2, i 3, ints 8, type 20 (FLOAT 1, INT 2, INTS 7)
TensorProto        dims 1, data_type 2 (FLOAT 1, INT32 6, INT64 7), name 8, raw_data 9,
                   external_data 13 (StringStringEntryProto key 1, value 2), data_location 14
ValueInfoProto     name 1, type 2 -> TypeProto.tensor_type 1 -> elem_type 1, shape 2
TensorShapeProto   dim 1 -> dim_value 1 | dim_param 2
=================  ==================================================================

A tensor's data may instead sit in a file beside the model (``data_location`` EXTERNAL): onnxruntime
then reads it from there (memory-mapped when its offset is page-aligned), which loads a model of
85 MB about twice as fast as parsing it out of the protobuf.

``tests/unit/providers/test_e5_onnx.py`` reads what this writes back with the ``onnx`` package (a dev
dependency) and runs its checker.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

import numpy as np

FLOAT, INT32, INT64 = 1, 6, 7
_DTYPES = {np.dtype(np.float32): FLOAT, np.dtype(np.int32): INT32, np.dtype(np.int64): INT64}


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 fields: two's complement in ten bytes
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _int(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _bytes(field: int, data: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _str(field: int, text: str) -> bytes:
    return _bytes(field, text.encode("utf-8"))


PAGE = 4096  # external data starts at page boundaries, so that onnxruntime can map it


class External:
    """The file that external tensors are written into: its name beside the model, and its bytes."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.data = bytearray()

    def add(self, raw: bytes) -> tuple[int, int]:
        """Appends ``raw`` at the next page boundary: its (offset, length)."""
        self.data += bytes(-len(self.data) % PAGE)
        offset = len(self.data)
        self.data += raw
        return offset, len(raw)


def tensor(name: str, array: np.ndarray, external: External | None = None) -> bytes:
    """A TensorProto holding ``array`` (float32, int32 or int64) as little-endian raw data, inline or,
    with ``external``, in that file."""
    a = np.ascontiguousarray(array)
    if a.dtype not in _DTYPES:
        raise ValueError(f"{name}: dtype {a.dtype} is not one of float32, int32, int64")
    dims = b"".join(_int(1, d) for d in a.shape)
    raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
    head = dims + _int(2, _DTYPES[a.dtype]) + _str(8, name)
    if external is None:
        return head + _bytes(9, raw)
    offset, length = external.add(raw)
    entries = {"location": external.location, "offset": str(offset), "length": str(length)}
    return head + b"".join(_bytes(13, _str(1, k) + _str(2, v)) for k, v in entries.items()) + _int(14, 1)


def attribute(name: str, value: float | int | Sequence[int]) -> bytes:
    if isinstance(value, float):
        return _str(1, name) + _varint(2 << 3 | 5) + struct.pack("<f", value) + _int(20, 1)
    if isinstance(value, int):
        return _str(1, name) + _int(3, value) + _int(20, 2)
    return _str(1, name) + b"".join(_int(8, v) for v in value) + _int(20, 7)


def node(
    op_type: str, inputs: Iterable[str], outputs: Iterable[str], domain: str = "", **attrs: float | int | Sequence[int]
) -> bytes:
    body = b"".join(_str(1, i) for i in inputs) + b"".join(_str(2, o) for o in outputs)
    body += _str(4, op_type)
    body += b"".join(_bytes(5, attribute(k, v)) for k, v in attrs.items())
    if domain:
        body += _str(7, domain)
    return body


def value_info(name: str, elem_type: int, shape: Sequence[int | str]) -> bytes:
    dims = b"".join(_bytes(1, _int(1, d) if isinstance(d, int) else _str(2, d)) for d in shape)
    tensor_type = _int(1, elem_type) + _bytes(2, dims)
    return _str(1, name) + _bytes(2, _bytes(1, tensor_type))


def model(
    nodes: Sequence[bytes],
    initializers: Sequence[bytes],
    inputs: Sequence[bytes],
    outputs: Sequence[bytes],
    opsets: dict[str, int],
    name: str = "graph",
    producer: str = "sunlib",
) -> bytes:
    graph = b"".join(_bytes(1, n) for n in nodes) + _str(2, name)
    graph += b"".join(_bytes(5, t) for t in initializers)
    graph += b"".join(_bytes(11, i) for i in inputs) + b"".join(_bytes(12, o) for o in outputs)
    out = _int(1, 9) + _str(2, producer) + _bytes(7, graph)
    out += b"".join(_bytes(8, (_str(1, d) if d else b"") + _int(2, v)) for d, v in opsets.items())
    return out
