"""The browser the web UI tests drive: Debian's chromium (never a downloaded one)."""

from __future__ import annotations

import shutil
from pathlib import Path

CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else shutil.which("chromium")
VIEWPORT = {"width": 1280, "height": 800}
PAGE_TIMEOUT_MS = 30_000
