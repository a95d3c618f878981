#!/usr/bin/env python3
"""Checks that every flag docs/upstream-differences.md names is a flag of some konn daemon.

The flags are read from core/config/daemon_flags.cc, the table the daemons' parsers are tested
against, so a flag renamed or removed leaves no stale row behind. `--a-b[-c]` names `--a-b` and
`--a-b-c`; `--prefix-*` needs at least one flag with that prefix. Exits 1 naming each unknown
flag.
"""
import re
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
doc = (root / "docs/upstream-differences.md").read_text()
known = set(re.findall(r'"([a-z0-9][a-z0-9-]*)"', (root / "core/config/daemon_flags.cc").read_text()))
known.add("help")  # every daemon has it; the parsers add it, not the table

named = set()
for code in re.findall(r"`([^`]*)`", doc):
    for flag in re.findall(r"--([a-z0-9][a-z0-9\-\[\]*]*)", code):
        m = re.fullmatch(r"([a-z0-9-]+)\[([a-z0-9-]+)\]", flag)
        named.update([m.group(1), m.group(1) + m.group(2)] if m else [flag])

unknown = []
for flag in sorted(named):
    if flag.endswith("*"):
        if not any(k.startswith(flag[:-1]) for k in known):
            unknown.append(flag)
    elif flag not in known:
        unknown.append(flag)
for flag in unknown:
    print(f"docs/upstream-differences.md names --{flag}, which no konn daemon has", file=sys.stderr)
print(f"docs/upstream-differences.md: {len(named)} flags named, {len(unknown)} unknown")
sys.exit(1 if unknown else 0)
