"""Build /work/trainvault/docs from installed packages' READMEs (METADATA bodies) and shipped .md docs."""
import os, re, shutil

import sys
import sysconfig

# usage: python build_vault.py OUT_DIR [SITE_PACKAGES]   (default: this interpreter's site-packages)
OUT = sys.argv[1] if len(sys.argv) > 1 else "/work/trainvault/docs"
SP = sys.argv[2] if len(sys.argv) > 2 else sysconfig.get_paths()["purelib"]

# (package-name in METADATA, folder, filename, display title)
MD_PKGS = {
    "annotated-doc": "Annotated Doc", "annotated-types": "annotated-types",
    "charset-normalizer": "Charset Normalizer", "click": "Click", "cloudpickle": "cloudpickle",
    "fsspec": "fsspec", "graphql-core": "GraphQL-core", "hf-xet": "hf-xet", "httpcore": "HTTPCore",
    "httpcore2": "HTTPCore 2", "httpx": "HTTPX", "httpx2": "HTTPX2", "huggingface_hub": "huggingface_hub",
    "hypothesis-graphql": "hypothesis-graphql", "idna": "idna", "ir_measures": "ir_measures",
    "markdown-it-py": "markdown-it-py", "ml_dtypes": "ml_dtypes", "narwhals": "Narwhals", "numpy": "NumPy",
    "onnx": "ONNX", "pydantic": "Pydantic", "pydantic_core": "pydantic-core", "pyrate-limiter": "PyrateLimiter",
    "python-dotenv": "python-dotenv", "requests": "Requests", "rich": "Rich", "ruff": "Ruff",
    "schemathesis": "Schemathesis", "sse-starlette": "sse-starlette", "starlette": "Starlette",
    "threadpoolctl": "threadpoolctl", "tokenizers": "Tokenizers", "truststore": "Truststore", "typer": "Typer",
    "urllib3": "urllib3", "uvicorn": "Uvicorn", "Werkzeug": "Werkzeug", "playwright": "Playwright for Python",
    
}
RST_PKGS = {
    "anyio": "AnyIO", "pytest": "pytest", "scikit-learn": "scikit-learn", "tqdm": "tqdm", "pathspec": "pathspec",
    "joblib": "joblib", "sortedcontainers": "Sorted Containers", "h11": "h11",
    "shellingham": "Shellingham", "apsw": "APSW",
}
SHIPPED = [  # (path under site-packages, vault path, title)
    ("playwright/driver/package/lib/tools/skills/playwright-cli/SKILL.md", "playwright/playwright-cli-skill.md", "playwright-cli"),
    ("playwright/driver/package/lib/tools/skills/playwright-cli/references/session-management.md", "playwright/cli-session-management.md", None),
    ("playwright/driver/package/lib/tools/skills/playwright-cli/references/storage-state.md", "playwright/cli-storage-state.md", None),
    ("playwright/driver/package/lib/tools/skills/playwright-cli/references/tracing.md", "playwright/cli-tracing.md", None),
    ("playwright/driver/package/lib/tools/skills/playwright-cli/references/video-recording.md", "playwright/cli-video-recording.md", None),
    ("playwright/driver/package/lib/tools/skills/playwright-cli/references/request-mocking.md", "playwright/cli-request-mocking.md", None),
    ("playwright/driver/package/lib/tools/skills/playwright-trace/SKILL.md", "playwright/playwright-trace-skill.md", "playwright-trace"),
    ("typer/.agents/skills/typer/SKILL.md", "typer/typer-skill.md", "Typer skill"),
    ("onnxruntime/tools/mobile_helpers/nnapi_supported_ops.md", "onnxruntime/nnapi-supported-ops.md", "ONNX Runtime NNAPI supported ops"),
    ("onnxruntime/Privacy.md", "onnxruntime/privacy.md", "ONNX Runtime privacy"),
]

def slug(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")

def metadata_body(pkg):
    for d in os.listdir(SP):
        if not d.endswith(".dist-info"):
            continue
        p = os.path.join(SP, d, "METADATA")
        if not os.path.exists(p):
            continue
        t = open(p, encoding="utf-8").read()
        hdr, _, body = t.partition("\n\n")
        m = re.search(r"^Name: (.*)$", hdr, re.M)
        if m and m.group(1).strip() == pkg:
            return body
    raise KeyError(pkg)

FENCE = re.compile(r"^(\s*)(```|~~~)")

def _clean_html_segment(seg):
    """Clean a piece of Markdown that is outside code fences."""
    seg = re.sub(r"<!--.*?-->\n?", "", seg, flags=re.S)
    seg = re.sub(r"\[!\[[^\]]*\]\([^)]*\)\]\(\s*[^)]*\)", "", seg)          # [![badge](img)](link)
    seg = re.sub(r"\[!\[[^\]]*\]\[[^\]]*\]\]\[[^\]]*\]", "", seg)            # [![badge][ref]][ref]
    seg = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", seg)                               # ![img](src)
    seg = re.sub(r"<img\b[^>]*>", "", seg, flags=re.S | re.I)
    seg = re.sub(r"<source\b[^>]*>", "", seg, flags=re.S | re.I)
    seg = re.sub(r"<h1[^>]*>(.*?)</h1>", lambda m: ("# " + re.sub(r"<[^>]+>", "", m.group(1)).strip()) if re.sub(r"<[^>]+>", "", m.group(1)).strip() else "", seg, flags=re.S | re.I)
    out = []
    for line in seg.split("\n"):
        if "<" in line and ">" in line and not re.sub(r"<[^>]*>", "", line).strip(" \t|·"):
            continue  # line made only of HTML tags
        if line.strip() in ("·", "|"):
            continue
        if not line.strip():
            line = ""
        out.append(line)
    return "\n".join(out)

def clean_md(text, title):
    # split into fenced code / non-code parts
    parts, buf, in_code, marker = [], [], False, None
    for line in text.splitlines():
        m = FENCE.match(line)
        if m and not in_code:
            parts.append(("t", "\n".join(buf))); buf = [line]; in_code = True; marker = m.group(2)
        elif m and in_code and m.group(2) == marker and line.strip().strip(marker[0]) == "":
            buf.append(line); parts.append(("c", "\n".join(buf))); buf = []; in_code = False
        else:
            buf.append(line)
    parts.append(("c" if in_code else "t", "\n".join(buf)))
    text = "\n".join(_clean_html_segment(p) if k == "t" else p for k, p in parts)
    text = re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
    text = strip_frontmatter(text)
    if not re.match(r"^# ", text):
        text = f"# {title}\n\n" + text
    return text

def strip_frontmatter(text):
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end != -1:
            return text[end + 5:].lstrip()
    return text

ADORN = set("=-~^\"'`#*+:._")

def rst_to_md(text, title):
    # substitutions defined with `.. |Name| replace:: value`
    subs = dict(re.findall(r"^\.\. \|([^|]+)\| replace:: *(.*)$", text, re.M))
    text = re.sub(r"^\.\. \|[^|]+\| replace::.*\n", "", text, flags=re.M)
    for k, v in subs.items():
        text = text.replace("|" + k + "|", v)
    # drop references to image substitutions (badges/logos)
    names = re.findall(r"^\.\. \|([^|]+)\| image::", text, re.M)
    text = re.sub(r"^\.\. \|[^|]+\| image::.*\n(?:[ \t]+\S.*\n)*", "", text, flags=re.M)
    for name in names:
        text = re.sub(r"\|" + re.escape(name) + r"\|_{0,2}", "", text)
    # hyperlinks whose text and target span lines
    text = re.sub(r"(?<!`)`([^`<]+?)\s+<([^>`\s]+)>`__?", lambda m: "[" + " ".join(m.group(1).split()) + "](" + m.group(2) + ")", text)
    lines = text.splitlines()
    out = []
    levels = []  # order of adornment styles seen
    i = 0
    in_code = False
    code_indent = None
    def level_for(key):
        if key not in levels:
            levels.append(key)
        return levels.index(key) + 1
    while i < len(lines):
        line = lines[i]
        # inside a literal block: keep indented lines
        if in_code:
            if line.strip() == "" or (len(line) - len(line.lstrip())) >= code_indent:
                out.append(line[code_indent:] if line.strip() else "")
                i += 1
                continue
            # close block (remove trailing blank lines inside)
            while out and out[-1] == "":
                out.pop()
            out.append("```")
            out.append("")
            in_code = False
        # directives to drop: image/badges/substitutions/raw html/contents
        m = re.match(r"^\s*\.\. (\|[^|]+\| )?(image|figure|raw|contents|meta|only|include|toctree)::", line)
        if m or re.match(r"^\s*\|[^|]+\|(\s+\|[^|]+\|)*\s*$", line):
            i += 1
            while i < len(lines) and lines[i].strip() and lines[i][:1] in (" ", "\t"):
                i += 1
            continue
        # transitions (a line of 4+ adornment chars between blank lines) -> drop
        if (line.strip() and set(line.strip()) <= ADORN and len(set(line.strip())) == 1 and len(line.strip()) >= 4
                and (i == 0 or not lines[i - 1].strip()) and (i + 1 >= len(lines) or not lines[i + 1].strip())):
            i += 1
            continue
        # link targets .. _name: url -> keep as markdown-ish ref
        m = re.match(r"^\.\. _([^:]+): *(\S+)\s*$", line)
        if m:
            out.append(f"[{m.group(1)}]: {m.group(2)}")
            i += 1
            continue
        # comments
        if re.match(r"^\.\.(\s|$)", line) and "::" not in line:
            i += 1
            while i < len(lines) and (lines[i].startswith("   ") or lines[i].strip() == ""):
                if lines[i].strip() == "" and i + 1 < len(lines) and not lines[i + 1].startswith("   "):
                    break
                i += 1
            continue
        # code-block directive
        m = re.match(r"^(\s*)\.\. (code-block|code|sourcecode)::\s*(\S*)", line)
        if m:
            lang = m.group(3)
            i += 1
            while i < len(lines) and re.match(r"^\s+:\w+:", lines[i]):
                i += 1
            # find indent of next non-blank
            j = i
            while j < len(lines) and lines[j].strip() == "":
                j += 1
            if j < len(lines):
                code_indent = len(lines[j]) - len(lines[j].lstrip())
                if code_indent == 0:
                    continue
            out.append("```" + lang)
            i = j
            in_code = True
            continue
        # overline + title + underline
        if (i + 2 < len(lines) and lines[i] and set(lines[i].strip()) <= ADORN and len(set(lines[i].strip())) == 1
                and len(lines[i].strip()) >= 3 and lines[i + 2].strip() == lines[i].strip() and lines[i + 1].strip()):
            lvl = level_for("o" + lines[i].strip()[0])
            out.append("#" * min(lvl, 6) + " " + inline(lines[i + 1].strip()))
            i += 3
            continue
        # title + underline
        if (i + 1 < len(lines) and line.strip() and not line.startswith(" ") and lines[i + 1].strip()
                and len(set(lines[i + 1].strip())) == 1 and lines[i + 1].strip()[0] in ADORN
                and len(lines[i + 1].strip()) >= max(3, len(line.strip()) - 2) and not lines[i + 1].startswith(" ")):
            lvl = level_for("u" + lines[i + 1].strip()[0])
            out.append("#" * min(lvl, 6) + " " + inline(line.strip()))
            i += 2
            continue
        # paragraph ending with :: -> literal block
        if line.rstrip().endswith("::") and i + 1 < len(lines):
            j = i + 1
            while j < len(lines) and lines[j].strip() == "":
                j += 1
            if j < len(lines) and lines[j].startswith((" ", "\t")):
                base = len(line) - len(line.lstrip())
                ind = len(lines[j]) - len(lines[j].lstrip())
                if ind > base:
                    txt = line.rstrip()[:-2].rstrip()
                    if txt.strip():
                        out.append(inline(txt + ":") if not txt.endswith(":") else inline(txt))
                    out.append("")
                    out.append("```")
                    code_indent = ind
                    in_code = True
                    i = j
                    continue
        out.append(inline(line))
        i += 1
    if in_code:
        while out and out[-1] == "":
            out.pop()
        out.append("```")
    text = "\n".join(out)
    text = re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"
    if not text.startswith("# "):
        text = f"# {title}\n\n" + text
    return text

def inline(s):
    s = re.sub(r"`([^`<]+?)\s*<([^>`]+)>`__?", r"[\1](\2)", s)  # `text <url>`_
    s = re.sub(r"``([^`]+)``", r"`\1`", s)
    s = re.sub(r":(?:py:)?(?:func|class|meth|mod|attr|ref|doc|obj|data|exc|option|envvar|pep|rfc|kbd|program|file|command):`([^`]+)`", r"`\1`", s)
    s = re.sub(r"(?<![`\w])`([^`]+)`_(?!\w)", r"\1", s)  # `Named Link`_
    # bare reference names like asyncio_ (outside inline code)
    parts = re.split(r"(`[^`]*`)", s)
    parts = [p if p.startswith("`") else re.sub(r"(?<=[A-Za-z0-9])_(?=[\s,.;:)]|$)", "", p) for p in parts]
    return "".join(parts)

def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    made = []
    for pkg, title in MD_PKGS.items():
        body = clean_md(metadata_body(pkg), title)
        path = f"{slug(pkg)}/README.md"
        made.append((path, body))
    for pkg, title in RST_PKGS.items():
        body = clean_md(rst_to_md(metadata_body(pkg), title), title)
        made.append((f"{slug(pkg)}/README.md", body))
    for src, dst, title in SHIPPED:
        body = open(os.path.join(SP, src), encoding="utf-8").read()
        body = clean_md(body, title or os.path.basename(dst))
        made.append((dst, body))
    for path, body in made:
        full = os.path.join(OUT, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        open(full, "w", encoding="utf-8").write(body)
    print(len(made), "documents")

if __name__ == "__main__":
    main()
