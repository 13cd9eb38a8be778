"""Builds the fast embedding tier (``sunlib.providers.embedders.e5fast``) from multilingual-e5-small."""
