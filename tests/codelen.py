#!/usr/bin/env python3
"""codelen.py: functions and files too long to read (tests/layering.sh runs it).

Usage: codelen.py [--function-lines N] [--file-lines M] DIR...
Lists every function longer than N lines (default 120) in the .c, .cu, .h
and .cuh files under DIR, and every .c or .cu file longer than M lines
(default 800); exits 1 when it lists anything.

A function runs from the line of its name to its closing brace, as ctags
counts it (tools that use ctags give the same numbers). The design
decision: a small brace counter of its own instead of ctags, which a fresh
CI machine may lack. It blanks comments, string and character literals and
preprocessor lines, then takes a '{' at file level (or in an extern "C",
namespace or struct body) that follows ')' as a function's body. A file
whose braces do not balance that way (an #if that opens a body twice) is
reported rather than miscounted.
"""
import os
import re
import sys

SOURCES = (".c", ".cu", ".h", ".cuh")
WHOLE = (".c", ".cu")


def blank(text):
    """Comments, literals and preprocessor lines as spaces; newlines kept."""
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a directive, with its continuation lines
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 2
                    continue
                if text.startswith("/*", j):  # a comment may span lines after a directive
                    k = text.find("*/", j + 2)
                    j = n if k < 0 else k + 2
                    continue
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
            continue
        else:
            out.append(c)
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


def name_of(signature):
    """The identifier before the parameter list, attributes skipped."""
    s = re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)", " ", signature)
    s = re.sub(r"__declspec\s*\([^()]*\)", " ", s)
    m = re.search(r"([A-Za-z_][\w:~]*(?:\s*operator\s*\S+?)?)\s*(?:<[^<>()]*>)?\s*\(", s)
    return m.group(1) if m else None


def functions(path):
    """(name, first line, last line) of each function body; None if unbalanced."""
    text = blank(open(path, encoding="utf-8", errors="replace").read())
    found, stack, start = [], [], 0  # stack: 'fn', 'scope' or 'other' per open brace
    for m in re.finditer(r"[{};]", text):
        c, at = m.group(), m.start()
        in_fn = "fn" in stack
        if c == "{":
            before = text[start:at]
            tail = before.rstrip()
            if in_fn:
                stack.append("other")
            elif re.search(r"\)\s*(const|noexcept|override|\s)*$", tail):
                nm = name_of(before)
                where = start + (before.find(nm) if nm else len(before) - len(before.lstrip()))
                stack.append("fn")
                found.append([nm or "?", text.count("\n", 0, where) + 1, None, len(stack)])
            elif re.search(r"(extern\s*\"\s*\"|namespace(\s+\w+)?)$", tail):
                stack.append("scope")
            else:
                stack.append("other")
            start = at + 1
        elif c == "}":
            if not stack:
                return None
            if stack[-1] == "fn":
                found[-1][2] = text.count("\n", 0, at) + 1
            stack.pop()
            if not in_fn or "fn" not in stack:
                start = at + 1
        elif not in_fn:
            start = at + 1
    if stack:
        return None
    return [(f[0], f[1], f[2]) for f in found]


def main(argv):
    fn_max, file_max, dirs = 120, 800, []
    args = iter(argv[1:])
    for a in args:
        if a == "--function-lines":
            fn_max = int(next(args))
        elif a == "--file-lines":
            file_max = int(next(args))
        else:
            dirs.append(a)
    bad = 0
    for top in dirs:
        base = os.path.dirname(os.path.abspath(top))
        for d, _, files in sorted(os.walk(top)):
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                path = os.path.join(d, f)
                shown = os.path.relpath(os.path.abspath(path), base)
                if f.endswith(WHOLE):
                    lines = open(path, encoding="utf-8", errors="replace").read().count("\n")
                    if lines > file_max:
                        print("%s: %d lines (at most %d)" % (shown, lines, file_max))
                        bad += 1
                fns = functions(path)
                if fns is None:
                    print("%s: braces do not balance once comments, strings and # lines are blanked" % shown)
                    bad += 1
                    continue
                for name, first, last in fns:
                    if last - first + 1 > fn_max:
                        print("%s:%d: %s is %d lines (at most %d)" % (shown, first, name, last - first + 1, fn_max))
                        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
