"""Versioned schema migrations, applied in order and recorded in PRAGMA user_version.

Per-space vector tables (vec0) are created on demand by the store, not here.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

from ..errors import IndexUnusable
from ..text.tokens import CJK_GLOB, text_script


def _stamp_existing_vectors(conn: apsw.Connection) -> None:
    """Vectors written before stamps existed match their chunks' default stamp (0)."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for name, table in conn.execute("SELECT name, vec_table FROM spaces").fetchall():
        if f"{table}_rowids" not in tables:
            continue  # a space whose table is missing: `sunlib doctor` reports it
        conn.execute(
            f"INSERT OR IGNORE INTO vector_stamps(space, chunk_rowid, stamp) SELECT ?, rowid, 0 FROM {table}_rowids",
            (name,),
        )


def _store_chunk_scripts(conn: apsw.Connection) -> None:
    """Each chunk's script, "cjk" or "other" (``text.tokens.text_script``), as a column: the
    cross-language routes narrow a search to one script, and classifying every chunk's text in
    each process cost about 20 ms per 1,000 chunks. The chunks already written are classified
    here, once; a text without a CJK character is "other" at once."""
    conn.execute("ALTER TABLE chunks ADD COLUMN script TEXT NOT NULL DEFAULT 'other'")
    rows = conn.execute("SELECT id, text FROM chunks WHERE text GLOB ?", (CJK_GLOB,)).fetchall()
    cjk = [(i,) for i, text in rows if text_script(str(text)) == "cjk"]
    conn.executemany("UPDATE chunks SET script = 'cjk' WHERE id = ?", cjk)


MIGRATIONS: tuple[str | Callable[[apsw.Connection], None], ...] = (
    # 1: notes, chunks, FTS, ACL, tags, metadata, embedding spaces and cache
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE notes (
        id INTEGER PRIMARY KEY,
        note_id TEXT NOT NULL UNIQUE,
        path TEXT NOT NULL UNIQUE,
        title TEXT NOT NULL,
        metadata TEXT NOT NULL,          -- JSON object, merged frontmatter + sidecar
        links TEXT NOT NULL,             -- JSON array of wikilink targets
        content_hash TEXT NOT NULL,
        mtime REAL NOT NULL,
        chunker TEXT NOT NULL,           -- fingerprint of the chunker that made its chunks
        indexed_at REAL NOT NULL
    );
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY,          -- also the rowid in chunks_fts and every vec table
        chunk_id TEXT NOT NULL UNIQUE,
        note_rowid INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
        ordinal INTEGER NOT NULL,
        heading_path TEXT NOT NULL,      -- JSON array
        text TEXT NOT NULL,
        start16 INTEGER NOT NULL,
        end16 INTEGER NOT NULL,
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL,
        token_count INTEGER NOT NULL,
        embed_hash TEXT NOT NULL         -- sha256 of the text given to embedders
    );
    CREATE INDEX chunks_note ON chunks(note_rowid, ordinal);
    CREATE TABLE note_acl (
        note_rowid INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
        principal TEXT NOT NULL,
        PRIMARY KEY (principal, note_rowid)
    ) WITHOUT ROWID;
    CREATE TABLE note_tags (
        note_rowid INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (tag, note_rowid)
    ) WITHOUT ROWID;
    CREATE TABLE note_meta (
        note_rowid INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
        key TEXT NOT NULL,
        value TEXT NOT NULL COLLATE NOCASE,
        PRIMARY KEY (key, value, note_rowid)
    ) WITHOUT ROWID;
    CREATE INDEX note_acl_note ON note_acl(note_rowid);
    CREATE INDEX note_tags_note ON note_tags(note_rowid);
    CREATE INDEX note_meta_note ON note_meta(note_rowid);
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        tokens, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 0'
    );
    CREATE TABLE spaces (
        name TEXT PRIMARY KEY,           -- provider:model:dim:chunker fingerprint
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        dim INTEGER NOT NULL,
        chunker TEXT NOT NULL,
        vec_table TEXT NOT NULL UNIQUE,
        created_at REAL NOT NULL
    );
    CREATE TABLE embedding_cache (
        space TEXT NOT NULL,             -- provider:model:dim (chunking does not change a text's vector)
        embed_hash TEXT NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (space, embed_hash)
    ) WITHOUT ROWID;
    """,
    # 2: saved runs (ask traces) and a term-statistics view of the full-text index (the index checker)
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        created_at REAL NOT NULL,
        principals TEXT NOT NULL,        -- JSON array, sorted: who asked (and who may read it back)
        question TEXT NOT NULL,
        refused INTEGER NOT NULL,
        total_ms REAL NOT NULL,
        frame TEXT NOT NULL,             -- JSON AnswerFrame
        trace TEXT NOT NULL              -- JSON RunTrace
    );
    CREATE INDEX runs_created ON runs(created_at);
    CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, 'row');
    """,
    # 3: generation stamps. A chunk carries the write generation it was stored at; a vector
    # carries the stamp of the chunk it was computed from. Vectors whose stamp no longer
    # matches (or whose chunk is gone) are stale and removed by reconcile (`sunlib doctor
    # --repair`, and every vector phase). index_uuid tells two files at one path apart.
    """
    ALTER TABLE chunks ADD COLUMN stamp INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE vector_stamps (
        space TEXT NOT NULL,             -- spaces.name
        chunk_rowid INTEGER NOT NULL,    -- the vector's rowid in the space's vec0 table
        stamp INTEGER NOT NULL,          -- chunks.stamp of the chunk the vector was computed from
        PRIMARY KEY (space, chunk_rowid)
    ) WITHOUT ROWID;
    INSERT OR IGNORE INTO meta(key, value) VALUES('index_uuid', lower(hex(randomblob(16))));
    """,
    _stamp_existing_vectors,
    # 5: conversations. A conversation is an id and its turns in order; each turn is one saved
    # ask run plus what the user typed (the run's question is the standalone form the pipeline
    # ran on) and, when the follow-up rule rewrote it, that standalone question. Who may read a
    # conversation follows from its runs (store/documents.py), so no principal is stored here.
    """
    CREATE TABLE conversations (
        conversation_id TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL         -- the newest turn's time: lists are newest first
    );
    CREATE INDEX conversations_updated ON conversations(updated_at);
    CREATE TABLE conversation_turns (
        conversation_id TEXT NOT NULL REFERENCES conversations(conversation_id) ON DELETE CASCADE,
        position INTEGER NOT NULL,       -- 1, 2, ... in the order the turns were asked
        run_id TEXT NOT NULL,            -- runs.run_id of the turn's saved run
        said TEXT NOT NULL,              -- the message as the user typed it
        standalone TEXT,                 -- the follow-up rewrite the pipeline ran on, if any
        PRIMARY KEY (conversation_id, position)
    ) WITHOUT ROWID;
    CREATE INDEX conversation_turns_run ON conversation_turns(run_id);
    """,
    # 6 (4 stamps the vectors written before 3): when each vector was written, the write
    # generation of its transaction, so derived indexes (the HNSW graphs of store/usearch.py) tell a
    # replaced vector from the one they hold for its chunk.
    "ALTER TABLE vector_stamps ADD COLUMN written INTEGER NOT NULL DEFAULT 0;",
    # 7: owners. A run and a conversation belong to the caller that saved them ("local", or
    # "token:" and 16 hex digits of the token's sha256: protocols.LOCAL_OWNER, server/auth.py);
    # only that owner reads, lists or continues them (an admin reads every owner's). Rows saved
    # before owners existed were saved without one: they are the local owner's.
    """
    ALTER TABLE runs ADD COLUMN owner TEXT NOT NULL DEFAULT 'local';
    ALTER TABLE conversations ADD COLUMN owner TEXT NOT NULL DEFAULT 'local';
    CREATE INDEX runs_owner ON runs(owner, created_at);
    CREATE INDEX conversations_owner ON conversations(owner, updated_at);
    """,
    # 8: each chunk's script (see _store_chunk_scripts)
    _store_chunk_scripts,
)

SCHEMA_VERSION = len(MIGRATIONS)


def _version(conn: apsw.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    current = int(row[0]) if row else 0
    if current > SCHEMA_VERSION:
        raise IndexUnusable(f"index schema v{current} is newer than this sunlib (v{SCHEMA_VERSION}); upgrade sunlib")
    return current


def migrate(conn: apsw.Connection) -> int:
    """Bring the schema up to date; returns the version. Refuses an index from a newer sunlib.

    Two processes may open a new index at once: the version is read again under the write
    lock (BEGIN IMMEDIATE), so only one of them runs each migration."""
    if _version(conn) == SCHEMA_VERSION:
        return SCHEMA_VERSION
    conn.execute("BEGIN IMMEDIATE")
    try:
        for version in range(_version(conn) + 1, SCHEMA_VERSION + 1):
            step = MIGRATIONS[version - 1]
            if callable(step):
                step(conn)
            else:
                conn.execute(step)
            conn.execute(f"PRAGMA user_version={version}")
        conn.execute("COMMIT")
    except BaseException:
        if not conn.getautocommit():  # SQLite may have rolled back already (Ctrl-C, a full disk)
            conn.execute("ROLLBACK")
        raise
    return SCHEMA_VERSION
