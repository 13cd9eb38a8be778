"""`sunlib serve`: the REST + SSE API and the web UI, over one library."""

from .app import create_app

__all__ = ["create_app"]
