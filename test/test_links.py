#!/usr/bin/python3
"""
test/test_links.py — the documentation stands on its own: every relative link and image in README.md,
docs/*.md, data/README.md and configs/studies/README.md points to a file (or folder) that git tracks, every #anchor into a Markdown
file names one of its headings, no tracked file points to notes outside the repository (the
`shared/` folder of the development machines), README.md stays at most README_MAX_LINES lines (the
details live in docs/) and train_gpt2.c below TRAINER_MAX_LINES (the shared work lives in llmc/). Prints each problem; exits 1 if there is any.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
README_MAX_LINES = 270
TRAINER_MAX_LINES = 1800  # train_gpt2.c reads top to bottom: layers, model, main; shared work lives in llmc/
OUTSIDE = re.compile(r"(?<![\w.-])(\.\./)*shared/[A-Z]+\.md")


def tracked():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = set(out.split("\n")) - {""}
    dirs = {os.path.dirname(f) for f in files}
    for d in list(dirs):
        while d:
            dirs.add(d)
            d = os.path.dirname(d)
    return files, dirs


def anchors(path):
    """GitHub's heading ids: lower case, punctuation dropped except '-' and '_', spaces to '-'."""
    seen, out = {}, set()
    in_code = False
    for line in open(os.path.join(ROOT, path), encoding="utf-8"):
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower().replace("`", "")).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def main():
    files, dirs = tracked()
    pages = ["README.md", "data/README.md", "configs/studies/README.md"] + sorted(f for f in files if f.startswith("docs/") and f.endswith(".md"))
    problems, count = [], 0
    for page in pages:
        if page not in files:
            problems.append(f"{page}: not tracked by git")
            continue
        text = open(os.path.join(ROOT, page), encoding="utf-8").read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)  # links inside code blocks are not links
        for target in LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            count += 1
            path, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if resolved.startswith(".."):
                problems.append(f"{page}: link '{target}' leaves the repository")
            elif resolved not in files and resolved not in dirs:
                problems.append(f"{page}: link '{target}' -> {resolved}: no such file in the repository")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                problems.append(f"{page}: link '{target}': {resolved} has no heading with id '{anchor}'")
    for f in sorted(files):
        p = os.path.join(ROOT, f)
        if f.startswith("test/fuzz/") or not os.path.isfile(p) or os.path.getsize(p) > 2_000_000:
            continue
        try:
            text = open(p, encoding="utf-8").read()
        except UnicodeDecodeError:
            continue
        for m in OUTSIDE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{f}:{line}: refers to '{m.group(0)}', which is not in the repository")
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().count("\n")
    if readme > README_MAX_LINES:
        problems.append(f"README.md: {readme} lines, more than {README_MAX_LINES}: move details to docs/")
    trainer = open(os.path.join(ROOT, "train_gpt2.c"), encoding="utf-8").read().count("\n")
    if trainer >= TRAINER_MAX_LINES:
        problems.append(f"train_gpt2.c: {trainer} lines, not below {TRAINER_MAX_LINES}: shared work goes to llmc/")
    for p in problems:
        print(p)
    print(f"test_links: {count} links in {len(pages)} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
