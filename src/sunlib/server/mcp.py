"""The MCP server: search, cited answers and the notes as tools an agent can call.

Built on the official ``mcp`` SDK (``MCPServer``). One server object serves either transport:

- **stdio** (``sunlib mcp``): the server acts as the principals it was started with (``--as``,
  ``--token`` or ``[mcp] principals``), and its saved runs are the local owner's (``--token``'s
  owner with ``--token``);
- **streamable HTTP** at ``/mcp`` of ``sunlib serve`` (``server/mcp_http.py``): every request passes
  ``principals_for`` first, the same check as ``/api`` (bearer token -> principals; loopback
  only without tokens; the Host and cross-site checks), and the tools read the principals
  and the owner (``auth.owner_for``) from that request. The transport is stateless: no MCP
  session carries an identity from one request to the next.

Every tool goes through the calls the HTTP routes use (``Library.search``, ``Library.ask``,
and the notes service, ``Library.notes``, for the notes), so the ACL, path confinement, atomic
writes, the write lock and the index sync are the API's own. A note the caller cannot see
answers exactly like an unknown one. ``status`` counts only visible notes.

Errors: the caller's mistakes and refusals of the API (``ApiError``, ``SunlibError``, bad
arguments) come back as tool results with ``isError`` and one line ``code: message``; a bug
comes back as the SDK's generic tool error. Neither ends the server.

Tool names and seed 004's registry (README "MCP"): notes.search -> ``search``, rag.search ->
``search`` (passages) and ``ask`` (the verified answer), notes.read -> ``get_note`` /
``multi_get``, notes.list -> ``list_notes``, notes.create / notes.update / notes.move ->
``create_note`` / ``update_note`` / ``move_note``; ``status`` is ours. ``ask`` gets an
``agentic`` flag when sunlib has an agentic ask mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from ..contracts import Citation, to_jsonable
from ..errors import NotFound, SunlibError
from ..library.notes import NoteWrite
from ..retrieve.engine import MAX_QUERY_CHARS
from ..store import LOCAL_OWNER
from ..version import __version__
from .errors import ApiError
from .routes_notes import page_json, vectors_budget, view_json, written_json
from .schemas import Filters
from .state import OWNER_KEY, PRINCIPALS_KEY, ServerState

READ_TOOLS = ("search", "ask", "get_note", "multi_get", "list_notes", "status")
WRITE_TOOLS = ("create_note", "update_note", "move_note")
NOTE_URI = "sunlib://note/{note_id}{?start_line,end_line}"
MAX_MULTI_GET = 20
# A tool result goes into a model's context: past this many characters a note's text is cut (the
# result says so), and the caller reads on with start_line/end_line. The API's own limit is 1 MB.
MAX_CONTENT_CHARS = 100_000

INSTRUCTIONS = """\
sunlib is the user's library of Markdown notes (English and Chinese). Use `search` to find \
passages, `ask` for an answer verified against the notes (it cites them, or refuses with a \
reason when the notes do not support an answer: report a refusal, do not guess), then \
`get_note` or the resource sunlib://note/{note_id}?start_line=A&end_line=B to read a cited \
passage. You see only the notes your principals may read."""

NoteRef = Annotated[
    str, Field(min_length=1, max_length=1024, description="a note_id (from search or list_notes) or its vault path")
]
Line = Annotated[int | None, Field(ge=1, description="1-based line, inclusive; omit for the whole note")]
FiltersArg = Annotated[
    Filters | None,
    Field(description="optional: folders (any), tags (all), note_ids (any), since/until (epoch s), metadata"),
]
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


@contextmanager
def _tool_errors() -> Iterator[None]:
    """The API's errors as tool errors (``code: message``), which the SDK returns with isError."""
    try:
        yield
    except ApiError as exc:
        raise ToolError(f"{exc.error}: {exc.message}") from None
    except SunlibError as exc:
        raise ToolError(f"{exc.code}: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ToolError(f"invalid_arguments: {where}: {first['msg']}") from None


def note_uri(note_id: str, start_line: int | None = None, end_line: int | None = None) -> str:
    lines = f"?start_line={start_line}&end_line={end_line}" if start_line and end_line else ""
    return f"sunlib://note/{note_id}{lines}"


def _citation(c: Citation) -> dict[str, Any]:
    return {**to_jsonable(c), "uri": note_uri(c.note_id, c.start_line, c.end_line)}


def _lines(text: str, start: int | None, end: int | None) -> tuple[str, int, int, int]:
    """(the lines start..end of text, first, last, total lines); a range past the end is an error."""
    lines = text.split("\n")
    total = len(lines)
    first, last = start or 1, min(end or total, total)
    if first > total or (end is not None and end < first):
        raise ToolError(f"bad_range: lines {start}-{end} of a note with {total} lines")
    return "\n".join(lines[first - 1 : last]), first, last, total


class SunlibTools:
    """The tools and the note resource over one server state. ``fixed`` is the stdio
    identity (and ``owner`` its owner); over HTTP the request's own principals and owner
    (``PRINCIPALS_KEY``, ``OWNER_KEY``) are used."""

    def __init__(
        self, state: ServerState, fixed: tuple[str, ...] | None, read_only: bool, owner: str = LOCAL_OWNER
    ) -> None:
        self.state, self.fixed, self.read_only, self.fixed_owner = state, fixed, read_only, owner

    def principals(self, ctx: Context) -> tuple[str, ...]:
        request = ctx.request_context.request
        scope = getattr(request, "scope", None)
        if isinstance(scope, dict) and PRINCIPALS_KEY in scope:
            return tuple(scope[PRINCIPALS_KEY])
        if self.fixed is not None and request is None:
            return self.fixed
        raise ToolError("forbidden: no principals for this request")

    def owner(self, ctx: Context) -> str:
        """Whose the runs this call saves are (read after ``principals``, which checks the caller)."""
        scope = getattr(ctx.request_context.request, "scope", None)
        if isinstance(scope, dict) and OWNER_KEY in scope:
            return str(scope[OWNER_KEY])
        return self.fixed_owner

    def _note_id(self, ref: str) -> str:
        """The note_id a reference names (an id, else a vault path); visibility is checked on read."""
        store = self.state.library.store
        if store.note_by_id(ref) is not None:
            return ref
        path = ref.strip()
        indexed = store.note_states_of([path]).get(path)
        if indexed is None:
            raise NotFound(f"no note {ref!r}")
        return indexed.note_id

    def _read(self, ref: str, principals: tuple[str, ...]) -> dict[str, Any]:
        try:
            return view_json(self.state.library.notes.read(self._note_id(ref), principals))
        except NotFound:  # name what the caller gave, never the id behind a path it cannot see
            raise NotFound(f"no note {ref!r}") from None

    # -- reading -------------------------------------------------------------------------

    def search(
        self,
        ctx: Context,
        query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS, description="what to look for")],
        mode: Annotated[
            Literal["hybrid", "bm25", "dense"] | None,
            Field(description="hybrid (default): words and meaning; bm25: exact words; dense: meaning only"),
        ] = None,
        filters: FiltersArg = None,
        limit: Annotated[int, Field(ge=1, le=50, description="how many passages")] = 10,
    ) -> dict[str, Any]:
        """Search the notes for passages. Each hit has the note's id, path and title, the heading
        path, a snippet, a score (higher is better; comparable within one search only) and a
        citation with its line range and a sunlib:// URI to read the passage. Use `ask` instead
        when you need an answer rather than passages."""
        principals = self.principals(ctx)
        with _tool_errors():
            result = self.state.library.search(
                query, mode=mode, filters=(filters or Filters()).contract(), principals=principals, limit=limit
            )
        hits = [
            {
                "rank": i,
                "note_id": h.note_id,
                "path": h.path,
                "title": h.title,
                "heading_path": list(h.heading_path),
                "score": round(h.score, 6),
                "snippet": h.snippet,
                "tags": list(h.tags),
                "citation": _citation(h.citation),
            }
            for i, h in enumerate(result.hits, 1)
        ]
        return {"query": query, "mode": result.mode, "results": hits, "warnings": list(result.warnings)}

    def ask(
        self,
        ctx: Context,
        question: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS, description="a question")],
        filters: FiltersArg = None,
    ) -> dict[str, Any]:
        """Answer a question from the notes. The answer is checked against its sources: each
        claim carries a marker [ref:CHUNK_ID] matching the chunk_id of a citation (path, heading,
        lines, quote, URI). When the notes do not support an answer, `refused` is true and `refusal` gives the
        reason code and the sentence to show the user: report it instead of answering yourself."""
        principals, owner = self.principals(ctx), self.owner(ctx)
        with _tool_errors(), self.state.asks.track():
            result = self.state.library.ask(
                question,
                filters=(filters or Filters()).contract(),
                principals=principals,
                start_conversation=False,
                owner=owner,
            )  # one question a tool call: the run is saved as the caller's, in no conversation
        frame = result.frame
        refusal = None
        if frame.refused:
            refusal = {
                "reason": frame.refusal_reason,
                "codes": [r.code for r in frame.refusals],
                "reasons": [{"code": r.code, "message": r.message} for r in frame.refusals],
            }
        return {
            "answer": frame.answer,
            "refused": frame.refused,
            "refusal": refusal,
            "citations": [_citation(c) for c in frame.citations],
            "confidence": frame.confidence,
            "confidence_level": frame.confidence_level,
            "run_id": result.run_id,
        }

    def get_note(
        self,
        ctx: Context,
        note: NoteRef,
        start_line: Line = None,
        end_line: Line = None,
    ) -> dict[str, Any]:
        """Read one note: its metadata and its text, whole or lines start_line..end_line (1-based,
        inclusive, as in citations). Text past 100,000 characters is cut (`truncated`: read on from
        end_line). `content` is null when the file on disk cannot be indexed."""
        principals = self.principals(ctx)
        with _tool_errors():
            return self._shaped(self._read(note, principals), start_line, end_line)

    def _shaped(self, detail: dict[str, Any], start: int | None, end: int | None) -> dict[str, Any]:
        out = {k: detail[k] for k in ("note_id", "path", "title", "tags", "metadata", "mtime", "links", "in_sync")}
        text = detail["content"]
        if text is None:
            return {**out, "content": None}
        content, first, last, total = _lines(text, start, end)
        truncated = len(content) > MAX_CONTENT_CHARS
        if truncated:
            content = content[:MAX_CONTENT_CHARS]
            last = first + content.count("\n")
        shown = {"content": content, "start_line": first, "end_line": last, "total_lines": total}
        return {**out, **shown, "truncated": truncated}

    def multi_get(
        self,
        ctx: Context,
        notes: Annotated[list[NoteRef], Field(min_length=1, max_length=MAX_MULTI_GET, description="ids or paths")],
    ) -> dict[str, Any]:
        """Read several notes at once (whole text). A note that does not exist or that you may
        not read is listed under `errors` instead; the others are still returned."""
        principals = self.principals(ctx)
        found, errors = [], []
        for ref in notes:
            try:
                with _tool_errors():
                    found.append(self._shaped(self._read(ref, principals), None, None))
            except ToolError as exc:
                errors.append({"note": ref, "error": str(exc)})
        return {"notes": found, "errors": errors}

    def list_notes(
        self,
        ctx: Context,
        folder: Annotated[str | None, Field(max_length=1024, description="only notes under this folder")] = None,
        tag: Annotated[str | None, Field(max_length=200, description="only notes with this tag")] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 50,
        offset: Annotated[int, Field(ge=0, le=10_000_000, description="skip this many (paging)")] = 0,
    ) -> dict[str, Any]:
        """List the notes you may read, by path: id, path, title, tags, metadata and mtime, with
        the total count for paging (offset + limit)."""
        principals = self.principals(ctx)
        with _tool_errors():
            return page_json(
                self.state.library.notes.list(principals, folder=folder, tag=tag, limit=limit, offset=offset)
            )

    def status(self, ctx: Context) -> dict[str, Any]:
        """The library's state as you can see it: how many notes you may read, the search mode,
        the embedding space, when the text was last indexed, and whether writing is allowed."""
        principals = self.principals(ctx)
        library = self.state.library
        with _tool_errors():
            _, visible = library.store.list_notes(principals, None, None, 1, 0)
            indexed_at = library.store.get_meta("text_indexed_at")
        return {
            "version": __version__,
            "principals": list(principals),
            "notes": visible,
            "search_mode": library.settings.search.mode,
            "embedding_space": library.space.name if library.settings.search.mode != "bm25" else None,
            "text_indexed_at": indexed_at,
            "read_only": self.read_only,
            "tools": [*READ_TOOLS, *(() if self.read_only else WRITE_TOOLS)],
        }

    # -- writing ---------------------------------------------------------------------------

    def create_note(
        self,
        ctx: Context,
        path: Annotated[str, Field(min_length=1, max_length=1024, description="vault path ending in .md, e.g. a/b.md")],
        content: Annotated[str, Field(description="the whole Markdown text, frontmatter (acl, tags) included")],
    ) -> dict[str, Any]:
        """Create a new note file and index it before returning (fails when the path is taken).
        Without an `acl:` in its frontmatter the note gets the vault's default ACL."""
        principals = self.principals(ctx)
        with _tool_errors(), vectors_budget(self.state, principals):
            return self._written(self._saved(principals, self.state.library.notes.create(path, content)))

    def update_note(
        self,
        ctx: Context,
        note: NoteRef,
        content: Annotated[str, Field(description="the new whole text (it replaces the old one)")],
    ) -> dict[str, Any]:
        """Replace a note's whole text; it keeps its id. Read it first with get_note."""
        principals = self.principals(ctx)
        with _tool_errors(), vectors_budget(self.state, principals):
            note_id = self._read(note, principals)["note_id"]
            return self._written(self._saved(principals, self.state.library.notes.update(note_id, content, principals)))

    def move_note(
        self,
        ctx: Context,
        note: NoteRef,
        new_path: Annotated[str, Field(min_length=1, max_length=1024, description="the new vault path (.md)")],
    ) -> dict[str, Any]:
        """Move or rename a note (its metadata sidecar too); it keeps its id. Fails when the new
        path is taken."""
        principals = self.principals(ctx)
        with _tool_errors(), vectors_budget(self.state, principals):
            note_id = self._read(note, principals)["note_id"]
            return self._written(self._saved(principals, self.state.library.notes.move(note_id, new_path, principals)))

    def _saved(self, principals: tuple[str, ...], write: NoteWrite) -> dict[str, Any]:
        return written_json(self.state, principals, write)

    @staticmethod
    def _written(detail: dict[str, Any]) -> dict[str, Any]:
        keys = ("note_id", "path", "title", "tags", "in_sync", "vectors_job")
        return {**{k: detail.get(k) for k in keys}, "uri": note_uri(detail["note_id"])}

    # -- the note resource -----------------------------------------------------------------

    def read_resource(self, note_id: str, ctx: Context, start_line: str = "", end_line: str = "") -> str:
        """The note's Markdown text, or the cited lines start_line..end_line (1-based)."""
        principals = self.principals(ctx)
        try:
            first = int(start_line) if start_line else None
            last = int(end_line) if end_line else None
        except ValueError:
            raise ResourceError("start_line and end_line must be whole numbers") from None
        try:
            with _tool_errors():
                detail = self._read(note_id, principals)
        except ToolError as exc:
            raise ResourceNotFoundError(str(exc)) from None
        if detail["content"] is None:
            raise ResourceError(f"{detail['path']} changed on disk and cannot be indexed")
        try:
            return _lines(detail["content"], first, last)[0]
        except ToolError as exc:
            raise ResourceError(str(exc)) from None


def build_server(
    state: ServerState, principals: tuple[str, ...] | None, read_only: bool, owner: str = LOCAL_OWNER
) -> MCPServer:
    """The MCP server over ``state``: the stdio identity ``principals`` and its ``owner`` (None and
    unused over HTTP, where each request brings its own), and no write tools when ``read_only``."""
    tools = SunlibTools(state, principals, read_only, owner)
    server: MCPServer = MCPServer("sunlib", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")
    for name in READ_TOOLS:
        server.add_tool(getattr(tools, name), name=name, annotations=READ, structured_output=True)
    if not read_only:
        for name in WRITE_TOOLS:
            server.add_tool(getattr(tools, name), name=name, annotations=WRITE, structured_output=True)
    about = "A note's Markdown text, or only lines start_line..end_line (1-based, as in citations)."
    server.resource(NOTE_URI, name="note", mime_type="text/markdown", description=about)(tools.read_resource)
    return server
