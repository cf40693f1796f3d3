#!/usr/bin/env python
# Copyright (c) 2026, fleet.vllm developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write docs/mutation-survivors.tsv from the last `make mutation` run (tools/mutation.sh).

Reads mutmut's results in .cache/mutation (``mutmut results``) and the mutated sources in
.cache/mutation/mutants, and prints one row per surviving mutant: module, function, mutant
number, category, the original statement, the mutated one, and a note. Categories:

* ``message``: only string literals differ (an error text, an evidence line, a dict key read
  with .get);
* ``error-detail``: a ``raise`` whose arguments changed otherwise;
* ``equivalent``: listed in tools/mutation-equivalent.tsv, which says why no test can tell
  the mutant from the original (the note column quotes it);
* ``logic``: the rest.

    python3 tools/mutation-survivors.py > docs/mutation-survivors.tsv
    python3 tools/mutation-survivors.py --table    # the per-module table of docs/mutation.md
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, ".cache", "mutation")
PACKAGE = "ansible_collections.fleet.vllm.plugins."
NAME_RE = re.compile(r"^(?P<module>[\w.]+)\.(?P<function>x\S+?)__mutmut_(?P<number>\d+)$")


def statuses():
    """mutant name -> mutmut's status (killed, survived, no tests, not checked, ...)."""
    mutmut = os.path.join(ROOT, ".venv", "bin", "mutmut")
    out = subprocess.run([mutmut, "results", "--all", "true"], cwd=WORK, capture_output=True, text=True,
                         check=True).stdout
    found = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep:
            found[name] = status
    return found


def survivors():
    return [name for name, status in statuses().items() if status == "survived"]


def table():
    """The per-module table of docs/mutation.md, as Markdown (timeouts and suspicious results count as killed:
    the tests noticed the mutant)."""
    counts = {}
    for name, status in statuses().items():
        match = NAME_RE.match(name)
        module = match.group("module") if match else name
        module = module[len(PACKAGE):] if module.startswith(PACKAGE) else module
        counts.setdefault(module, {})
        counts[module][status] = counts[module].get(status, 0) + 1
    print("| module | mutants | killed | survived | not reached | not run yet | survival |")
    print("|---|---|---|---|---|---|---|")
    total = {}
    for module in sorted(counts) + ["**all**"]:
        row = total if module == "**all**" else counts[module]
        if row is not total:
            for status, number in row.items():
                total[status] = total.get(status, 0) + number
        killed = row.get("killed", 0) + row.get("timeout", 0) + row.get("suspicious", 0)
        survived = row.get("survived", 0)
        rate = "%.1f%%" % (100.0 * survived / (killed + survived)) if killed + survived else "-"
        label = module if module.startswith("*") else "`%s`" % module
        print("| %s | %d | %d | %d | %d | %d | %s |" % (
            label, sum(row.values()), killed, survived, row.get("no tests", 0), row.get("not checked", 0), rate))


def equivalents():
    """(module, function, number) -> why, from tools/mutation-equivalent.tsv."""
    known = {}
    with open(os.path.join(ROOT, "tools", "mutation-equivalent.tsv"), encoding="utf-8") as handle:
        for line in handle:
            if not line.strip() or line.startswith("#"):
                continue
            module, function, number, why = line.rstrip("\n").split("\t", 3)
            known[(module, function, number)] = why
    return known


_FUNCTIONS = {}


def functions(module):
    """mangled function name -> ast node, for every function of a module's mutated source."""
    if module not in _FUNCTIONS:
        path = os.path.join(WORK, "mutants", *module.split(".")) + ".py"
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        _FUNCTIONS[module] = dict((node.name, node) for node in ast.walk(tree)
                                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return _FUNCTIONS[module]


def _header(node):
    """A statement as one line; a compound statement by its first line only."""
    text = ast.unparse(node)
    return text.splitlines()[0] if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try)) else \
        " ".join(part.strip() for part in text.splitlines())


def changed_statement(original, mutant):
    """(original, mutated) text of the innermost statement that differs, or of the signature."""
    pairs = list(zip((n for n in ast.walk(original) if isinstance(n, ast.stmt)),
                     (n for n in ast.walk(mutant) if isinstance(n, ast.stmt))))
    differing = [(a, b) for a, b in pairs[1:] if ast.dump(a) != ast.dump(b)]
    innermost = [(a, b) for a, b in differing
                 if not any(x is not a and any(x is n for n in ast.walk(a)) for x, dummy in differing)]
    if innermost:
        a, b = innermost[-1]
        return _header(a), _header(b)
    name = display(original.name.split("__mutmut_")[0])
    return ("def %s(%s)" % (name, ast.unparse(original.args)), "def %s(%s)" % (name, ast.unparse(mutant.args)))


def display(function):
    """mutmut's mangled name -> the code's: x_name -> name, x\u01c1Class\u01c1method -> Class.method."""
    if function.startswith("x\u01c1"):
        return ".".join(function.split("\u01c1")[1:])
    return function[2:] if function.startswith("x_") else function


def _tokens(text):
    try:
        return [(tok.type, tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                if tok.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None


def category(before, after):
    old, new = _tokens(before), _tokens(after)
    if old is not None and new is not None and len(old) == len(new):
        diff = [(a, b) for a, b in zip(old, new) if a != b]
        if diff and all(a[0] == tokenize.STRING and b[0] == tokenize.STRING for a, b in diff):
            return "message"
    if before.startswith("raise "):
        return "error-detail"
    return "logic"


def main():
    known = equivalents()
    rows = []
    for name in survivors():
        match = NAME_RE.match(name)
        if not match:
            rows.append((name, "", "", "logic", "", "", "the name is not one this script reads"))
            continue
        module, function, number = match.group("module"), match.group("function"), match.group("number")
        defs = functions(module)
        original = defs.get("%s__mutmut_orig" % function)
        mutant = defs.get("%s__mutmut_%s" % (function, number))
        before, after = changed_statement(original, mutant) if original and mutant else ("", "")
        short = module[len(PACKAGE):] if module.startswith(PACKAGE) else module
        why = known.get((short, display(function), number))
        kind = "equivalent" if why is not None else category(before, after)
        rows.append((short, display(function), number, kind, before, after, why or ""))
    rows.sort(key=lambda row: (row[0], row[1], int(row[2] or 0)))
    out = sys.stdout
    out.write("# Surviving mutants of the last `make mutation` run, by tools/mutation-survivors.py (docs/mutation.md).\n")
    out.write("# module\tfunction\tmutant\tcategory\toriginal\tmutated\tnote\n")
    for row in rows:
        out.write("\t".join(str(cell).replace("\t", " ").replace("\n", " ") for cell in row) + "\n")
    unused = set(known) - set((row[0], row[1], row[2]) for row in rows)
    for key in sorted(unused):
        sys.stderr.write("mutation-survivors: %s %s %s is listed as equivalent but did not survive\n" % key)


if __name__ == "__main__":
    if sys.argv[1:] == ["--table"]:
        table()
    else:
        main()
