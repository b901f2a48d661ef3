#!/usr/bin/env python3
"""The library's rooms and the lines between them (harness/src), read from its `crate::` and
`super::` paths: the circles among top-level modules and among files, and the floors (the
longest chain of modules, each using the next). Comments and unit-test files are left out.

    python3 ci/rooms.py            # print circles, floors and the longest chain
    python3 ci/rooms.py --check    # exit 1 on a circle (of modules or of files) or > 10 floors
    python3 ci/rooms.py --root DIR  # another source tree (the test's small ones)

The `harness/tests/rooms.rs` test runs the check, so a change that closes a circle fails there.
"""
import collections
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness", "src")
if "--root" in sys.argv[1:]:
    ROOT = sys.argv[sys.argv.index("--root") + 1]
MAX_FLOORS = 10

def module_of(path):
    parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return tuple(parts)


def sources():
    out = {}
    for folder, _, names in os.walk(ROOT):
        if os.path.relpath(folder, ROOT).split(os.sep)[0] == "bin":
            continue
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(folder, name)
                out[module_of(path)] = path
    return out


def code(path):
    text = open(path, encoding="utf-8").read()
    inline_tests = text.find("#[cfg(test)]\nmod tests {")
    if inline_tests >= 0:
        text = text[:inline_tests]
    return "\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))


def file_edges():
    """Each file's module → the modules its `crate::` and `super::` paths name."""
    mods = sources()

    def resolve(parts):
        for k in range(len(parts), 0, -1):
            if tuple(parts[:k]) in mods:
                return tuple(parts[:k])
        return None

    out = collections.defaultdict(set)
    for module, path in mods.items():
        if not module or module[-1] == "tests":
            continue
        text = code(path)
        targets = [ref.strip(":").split("::") for ref in re.findall(r"\bcrate((?:::\w+)+)", text)]
        for ups, rest in re.findall(r"\b((?:super::)+)((?:\w+::)*\w+)", text):
            parent = list(module)[: -ups.count("super::")] if len(module) >= ups.count("super::") else []
            targets.append(parent + rest.split("::"))
        for parts in targets:
            target = resolve(parts)
            if target and target != module:
                out[module].add(target)
    return out


def at_depth(edges, depth):
    """The same lines between modules `depth` levels deep (1: the top-level modules)."""
    out = collections.defaultdict(set)
    for a, bs in edges.items():
        for b in bs:
            if a[:depth] != b[:depth]:
                out[a[:depth]].add(b[:depth])
    return out


def components(graph):
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    nodes = sorted(set(graph) | {b for bs in graph.values() for b in bs})

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return comps


def longest_chain(graph, comps):
    comp_of = {v: i for i, c in enumerate(comps) for v in c}
    down = collections.defaultdict(set)
    for a, bs in graph.items():
        for b in bs:
            if comp_of[a] != comp_of[b]:
                down[comp_of[a]].add(comp_of[b])
    height = {}
    if not comps:
        # One room and no arrow between rooms: no floor to count.
        return []

    def h(c):
        if c not in height:
            height[c] = 1 + max((h(d) for d in down[c]), default=0)
        return height[c]

    top = max(range(len(comps)), key=h)
    chain = [top]
    while down[chain[-1]]:
        chain.append(max(down[chain[-1]], key=h))
    return [comps[c] for c in chain]


def name(module):
    return "/".join(module)


def main():
    problems = []
    files = file_edges()
    modules = at_depth(files, 1)
    module_comps = components(modules)
    for comp in module_comps:
        if len(comp) > 1:
            problems.append("circle of modules: " + " ↔ ".join(map(name, comp)))
    chain = longest_chain(modules, module_comps)
    print(f"floors: {len(chain)} ({' → '.join(name(c[0]) for c in chain)})")
    if len(chain) > MAX_FLOORS:
        problems.append(f"{len(chain)} floors, more than {MAX_FLOORS}")
    for comp in components(files):
        if len(comp) > 1:
            problems.append("circle of files: " + " ↔ ".join(map(name, comp)))
    for p in problems:
        print(p)
    if "--check" in sys.argv[1:] and problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
