"""YAML for frontmatter and sidecars, with a bound on what a few bytes may expand to.

``yaml.safe_load`` bounds nothing but the input: aliases make a 269-byte note expand to
millions of values (each ``*a`` repeats everything ``&a`` holds), and deep nesting
(``[[[...]]]``) exhausts Python's stack in the recursive composer. ``load_yaml`` counts
while PyYAML composes the node graph, before any Python object is built, and stops at:

- ``MAX_DEPTH`` levels of nesting (checked before each descent, so no RecursionError, and for
  ``[``/``{`` already in the scanner);
- ``MAX_NODES`` values in the expanded document: an alias counts as every value it
  stands for, so the count is that of the JSON the metadata would become;
- ``MAX_SCALAR_CHARS`` characters of scalars in the expanded document (an alias to one
  long string, repeated, is caught here).

A mapping that repeats a key is refused too (``DuplicateKey``): PyYAML keeps the last value in
silence, so a second ``acl:`` could widen a note's access without anyone seeing it.

The figures are far above any real frontmatter (the sample vault's largest has 12 values
and depth 2) and low enough that the worst accepted document is small: at most
``MAX_SCALAR_CHARS`` characters of text in at most ``MAX_NODES`` values.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_DEPTH = 32
MAX_NODES = 10_000
MAX_SCALAR_CHARS = 64 * 1024


class YamlTooLarge(ValueError):
    """The document is over one of the bounds; the message names it."""


class DuplicateKey(ValueError):
    """A mapping names the same key twice; the message names it."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer keeps the expanded size of every node it has composed."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0
        self._chars = 0
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, scalar chars) it expands to

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # The scanner looks up to 1024 characters ahead for every open "[" or "{" (each may start
        # a key), so 1000 of them cost a second before the composer sees the first: stop here.
        super().fetch_flow_collection_start(TokenClass)
        if self.flow_level > MAX_DEPTH:
            raise YamlTooLarge(f"nested deeper than {MAX_DEPTH} levels")

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)  # the anchored node, already composed
            nodes, chars = self._sizes.get(id(node), (1, 0))
            self._count(nodes, chars)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YamlTooLarge(f"nested deeper than {MAX_DEPTH} levels")
        before = (self._nodes, self._chars)
        node = super().compose_node(parent, index)
        self._depth -= 1
        if isinstance(node, ScalarNode):
            self._count(1, len(node.value))
        elif isinstance(node, SequenceNode | MappingNode):
            self._count(1, 0)
        if node is not None:
            self._sizes[id(node)] = (self._nodes - before[0], self._chars - before[1])
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise DuplicateKey(f"the key {key!r} appears twice")
            seen.add(key)
        return super().construct_mapping(node, deep)

    def _count(self, nodes: int, chars: int) -> None:
        self._nodes += nodes
        self._chars += chars
        if self._nodes > MAX_NODES:
            raise YamlTooLarge(f"more than {MAX_NODES:,} values once aliases are expanded")
        if self._chars > MAX_SCALAR_CHARS:
            raise YamlTooLarge(f"more than {MAX_SCALAR_CHARS:,} characters of values once aliases are expanded")


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` of one document within the bounds above; YamlTooLarge past them."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
