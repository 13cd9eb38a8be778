"""The write path: what keeps the index in step with the vault.

``indexing`` syncs text then vectors, ``watch`` re-syncs the files that change, ``freshness``
re-checks a file before a read serves it, ``filestatus`` reports each file's state, and
``notes_io`` writes notes into the vault safely.
"""
