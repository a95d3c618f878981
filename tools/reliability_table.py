#!/usr/bin/env python3
"""Builds the bad-input and fault table of docs/bad-input.md from annotations in the tests.

An annotation is a comment line directly above a TEST_CASE or SECTION (several may precede one):

    // reliability: <daemon> | <input or fault> | <answer> | <logged> | <what keeps running>
    // reliability+: <more text, appended to the previous annotation>

Without arguments the table is written between the markers in docs/bad-input.md (a section is
appended when they are missing). With --check nothing is written: exits 1 when the doc's table is
not what would be generated, or when an annotation is malformed or belongs to no test.
"""
import argparse
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "bad-input.md"
SOURCE_DIRS = ["core", "proxy-server", "proxy-agent", "socks5", "kubeproxy-http", "test-client",
               "tests"]
BEGIN = "<!-- reliability-table:begin -->"
END = "<!-- reliability-table:end -->"
DAEMON_ORDER = ["proxy-server", "proxy-agent", "socks5", "kubeproxy-http"]
HEADER = ["daemon", "input or fault", "answer", "logged", "keeps running", "test"]
INTRO = """## Bad input and faults

Every row below is generated from a `// reliability: daemon | input or fault | answer | logged |
keeps running` comment placed above the test case (or section) that sends the input or injects
the fault, by `tools/reliability_table.py`; the `docs.reliability_table` ctest runs it with
`--check` and fails when this table and the annotations differ. "answer" is what the peer gets,
"logged" the daemon's log line (level and text), "keeps running" what the test shows still works.
The soak run (`konn-soak`: SIGKILLs of agents and of a server, resets mid-transfer, slow readers)
is in reliability.md.
"""

ANNOTATION = re.compile(r"^\s*// reliability(\+?):\s?(.*)$")
TEST = re.compile(r"\b(TEST_CASE|SECTION)\s*\(")
LITERALS = re.compile(r'\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')


def test_name(lines, i, match):
    """The (concatenated) string literal naming the TEST_CASE or SECTION that starts at line i."""
    text = lines[i][match.start():] + " " + " ".join(l.strip() for l in lines[i + 1:i + 4])
    m = LITERALS.search(text)
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))) if m else "?"


def scan():
    rows, errors = [], []
    files = sorted(p for d in SOURCE_DIRS if (ROOT / d).is_dir()
                   for p in (ROOT / d).rglob("*_test.cc"))
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        lines = path.read_text(encoding="utf-8").splitlines()
        pending, case = [], None  # pending: [line number, text] awaiting their test
        for i, line in enumerate(lines):
            a = ANNOTATION.match(line)
            if a:
                if a.group(1) == "+":
                    if not pending:
                        errors.append(f"{rel}:{i + 1}: 'reliability+' continues no annotation")
                    else:
                        pending[-1][1] += " " + a.group(2).strip()
                else:
                    pending.append([i + 1, a.group(2).strip()])
                continue
            t = TEST.search(line)
            if not t or line.lstrip().startswith("//"):
                continue
            name = test_name(lines, i, t)
            if t.group(1) == "TEST_CASE":
                case, where = name, name
            else:
                where = f"{case} / {name}" if case else name
            for lineno, text in pending:
                cells = [c.strip() for c in text.split("|")]
                if len(cells) != 5 or not all(cells):
                    errors.append(f"{rel}:{lineno}: expected 5 non-empty fields separated by '|', "
                                  f"got {len(cells)}: {text}")
                    continue
                rows.append(cells + [f"`{rel}`: {where}"])
            pending = []
        for lineno, _ in pending:
            errors.append(f"{rel}:{lineno}: annotation without a following TEST_CASE or SECTION")
    rank = {d: n for n, d in enumerate(DAEMON_ORDER)}
    rows.sort(key=lambda r: (rank.get(r[0], len(rank)), r[0]))  # stable: file order within
    return rows, errors


def render(rows):
    def line(cells):
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
    out = [line(HEADER), "|" + "---|" * len(HEADER)] + [line(r) for r in rows]
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    rows, errors = scan()
    for e in errors:
        print(e, file=sys.stderr)
    table = render(rows)
    doc = DOC.read_text(encoding="utf-8")
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        current, tail = rest.split(END, 1)
        current = current.strip("\n") + "\n"
    else:
        head, current, tail = doc.rstrip("\n") + "\n\n" + INTRO + "\n", None, "\n"
    if args.check:
        if current != table:
            print(f"{DOC.relative_to(ROOT)}: the table differs from the test annotations; "
                  "run tools/reliability_table.py", file=sys.stderr)
            sys.stderr.writelines(difflib.unified_diff(
                (current or "").splitlines(True), table.splitlines(True), "doc", "annotations"))
            return 1
    else:
        DOC.write_text(head + BEGIN + "\n\n" + table + "\n" + END + tail, encoding="utf-8")
    print(f"{DOC.relative_to(ROOT)}: {len(rows)} rows" + (" up to date" if args.check else " written")
          + (f"; {len(errors)} bad annotation(s)" if errors else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
