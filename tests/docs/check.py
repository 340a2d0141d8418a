#!/usr/bin/env python3
"""Checks of the user guide (docs/) and README.md, run by tests/docs/run.sh after `mdbook build`.

1. Links. Every link and image of the built book (docs/book/*.html) that stays inside the book
   resolves: the page exists and, for `page.html#anchor` or `#anchor`, an element of the target
   has that id. Every relative link and image of README.md resolves in the repository, and an
   `#anchor` on README.md or on a Markdown file names one of its headings (GitHub's slugs).
2. Settings. Each table headed `| flag | environment | default | meaning |` in docs/src agrees with
   the binary's `cluecdc serve --help`: a row names one flag the binary has, its environment
   variable and its default; docs/src/reference/settings.md has a row for every flag of --help.
   A switch (a flag without a value) has no default in --help; its default is read from the
   clap attribute in src/ that declares its environment variable.

Exits non-zero with one line per problem.
"""
import argparse
import html.parser
import pathlib
import re
import subprocess
import sys
import urllib.parse

SETTINGS_HEADER = ["flag", "environment", "default", "meaning"]
REFERENCE = "docs/src/reference/settings.md"
NONE = "—"


class Page(html.parser.HTMLParser):
    """The ids of one HTML page and the links (href/src) it holds."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for key in ("href", "src"):
            if tag in ("a", "img") and a.get(key) is not None:
                self.links.append(a[key])


def parse_html(path):
    p = Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def external(link):
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", link)) or link.startswith("//")


def check_book(book):
    problems, pages = [], {}
    files = sorted(book.rglob("*.html"))
    if not files:
        return [f"{book}: no HTML pages (did mdbook build run?)"], 0
    for f in files:
        pages[f.resolve()] = parse_html(f)
    count = 0
    for f in files:
        # print.html repeats every page with rewritten anchors; 404.html and toc.html are
        # mdBook's own; the pages themselves are checked one by one.
        if f.name in ("print.html", "404.html", "toc.html"):
            continue
        for link in pages[f.resolve()].links:
            if not link or external(link) or link.startswith("javascript:"):
                continue
            count += 1
            target, _, frag = link.partition("#")
            target = urllib.parse.unquote(target)
            dest = (f.parent / target).resolve() if target else f.resolve()
            if dest.is_dir():
                dest = dest / "index.html"
            name = f.relative_to(book)
            if not dest.exists():
                problems.append(f"book {name}: link {link!r} points at a missing file")
                continue
            frag = urllib.parse.unquote(frag)
            if frag and dest.suffix == ".html":
                ids = pages.get(dest)
                if ids is None:
                    ids = parse_html(dest)
                if frag not in ids.ids:
                    problems.append(f"book {name}: link {link!r}: no id {frag!r} in {dest.relative_to(book.resolve())}")
    return problems, count


def strip_code(md):
    """Markdown without fenced code blocks and code spans (links there are not links)."""
    md = re.sub(r"^```.*?^```", "", md, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", md)


def github_slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"<[^>]+>", "", s)
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def md_anchors(path):
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    seen, anchors = {}, set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.M):
        slug = github_slug(re.sub(r"[`*_]", "", re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))))
        n = seen.get(slug, 0)
        anchors.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    return anchors


def check_readme(root):
    problems, count = [], 0
    readme = root / "README.md"
    text = strip_code(readme.read_text(encoding="utf-8"))
    for m in re.finditer(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text):
        link = m.group(1)
        if external(link):
            continue
        count += 1
        target, _, frag = link.partition("#")
        dest = (root / urllib.parse.unquote(target)).resolve() if target else readme
        if not dest.exists():
            problems.append(f"README.md: link {link!r} points at a missing file")
            continue
        if frag and dest.suffix == ".md" and frag not in md_anchors(dest):
            problems.append(f"README.md: link {link!r}: no heading with the anchor {frag!r} in {dest.relative_to(root)}")
    return problems, count


def binary_flags(binary):
    """{flag: (env, default or None, takes_value)} from `serve --help`."""
    out = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    flags, current = {}, None
    for line in out.splitlines():
        # An option starts a line ("  -h, --help" or "      --listen <LISTEN>"); its help text
        # follows on the same line (short format) or on the lines indented below it (long).
        m = re.match(r"^  (?:-\w, |    )(--[a-z0-9-]+)( <[^>]+>)?(.*)$", line)
        if m:
            current = m.group(1)
            flags[current] = {"takes_value": bool(m.group(2)), "text": m.group(3)}
        elif current and line.startswith("   "):
            flags[current]["text"] += " " + line.strip()
        else:
            current = None
    result = {}
    for flag, f in flags.items():
        if flag == "--help":
            continue
        env = re.search(r"\[env: ([A-Z0-9_]+)[=\]]", f["text"])
        default = re.search(r"\[default: (\"[^\"]*\"|[^\]]*)\]", f["text"])
        value = default.group(1) if default else None
        if value is not None and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        result[flag] = (env.group(1) if env else None, value or None, f["takes_value"])
    return result


def source_default(root, env):
    """The default_value of the clap attribute in src/ that names `env = "<env>"`."""
    for rs in sorted((root / "src").rglob("*.rs")):
        for attr in re.findall(r"#\[arg\((.*?)\)\]\s*\n", rs.read_text(encoding="utf-8"), flags=re.S):
            if re.search(rf'env\s*=\s*"{env}"', attr):
                m = re.search(r'default_value(?:_t)?\s*=\s*"?([^",)]*)"?', attr)
                return m.group(1) if m else None
    return None


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def code_spans(cell):
    return re.findall(r"`([^`]*)`", cell)


def settings_tables(path):
    """Rows of each settings table in one Markdown file: [(line number, cells)]."""
    lines, rows, inside = path.read_text(encoding="utf-8").splitlines(), [], False
    for n, line in enumerate(lines, 1):
        if line.startswith("|") and [c.lower() for c in cells(line)] == SETTINGS_HEADER:
            inside = True
            continue
        if inside and re.match(r"^\|[\s|:-]+\|$", line):
            continue
        if inside and line.startswith("|"):
            rows.append((n, cells(line)))
        else:
            inside = False
    return rows


def check_settings(root, binary):
    problems = []
    flags = binary_flags(binary)
    if len(flags) < 10:
        return [f"`{binary} serve --help` lists {len(flags)} flags: the help output was not understood"], 0, 0
    src_text = "\n".join(p.read_text(encoding="utf-8") for p in (root / "src").rglob("*.rs"))
    covered, rows_checked = {}, 0
    for md in sorted((root / "docs/src").rglob("*.md")):
        rel = md.relative_to(root)
        for n, row in settings_tables(md):
            where = f"{rel}:{n}"
            if len(row) != 4:
                problems.append(f"{where}: a settings row needs 4 cells, has {len(row)}")
                continue
            rows_checked += 1
            flag_cell, env_cell, default_cell, _ = row
            named = [s for s in code_spans(flag_cell) if s.startswith("--")]
            envs = code_spans(env_cell)
            if len(named) != 1:
                problems.append(f"{where}: name exactly one flag per row (found {named or flag_cell!r})")
                continue
            flag = named[0]
            if flag not in flags:
                problems.append(f"{where}: {flag} is not a flag of `cluecdc serve` (see `cluecdc serve --help`)")
                continue
            env, default, takes_value = flags[flag]
            if not envs or envs[0] != env:
                problems.append(f"{where}: {flag}: environment {envs[0] if envs else env_cell!r}, the binary says {env}")
            for extra in envs[1:]:
                if f'"{extra}"' not in src_text:
                    problems.append(f"{where}: {flag}: {extra} is read nowhere in src/")
            spans = code_spans(default_cell)
            given = spans[0] if spans else (None if default_cell in (NONE, "") else default_cell)
            if not takes_value and default is None:
                default = source_default(root, env)
            if given != default:
                problems.append(f"{where}: {flag}: default {given if given is not None else NONE!r}, the binary says {default if default is not None else NONE!r}")
            if str(rel) == REFERENCE:
                if flag in covered:
                    problems.append(f"{where}: {flag} has a second row (first on line {covered[flag]})")
                covered[flag] = n
    for flag in flags:
        if flag not in covered:
            problems.append(f"{REFERENCE}: no row for {flag} (`cluecdc serve --help` has it)")
    return problems, rows_checked, len(flags)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True, type=pathlib.Path)
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    root = a.root.resolve()
    problems = []
    p, n = check_book(root / "docs/book")
    problems += p
    print(f"docs: {n} internal links of the built book checked")
    p, n = check_readme(root)
    problems += p
    print(f"docs: {n} relative links and images of README.md checked")
    p, rows, nflags = check_settings(root, a.bin)
    problems += p
    print(f"docs: {rows} settings rows checked against the {nflags} flags of `cluecdc serve --help`")
    for line in problems:
        print(f"docs: FAIL {line}")
    if problems:
        print(f"docs: {len(problems)} problems")
        sys.exit(1)
    print("docs: links and settings agree")


if __name__ == "__main__":
    main()
