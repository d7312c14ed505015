#!/usr/bin/env python3
"""Checks stoker's layering (run by CTest as layering.stages_and_includes).

  - the stages' link graph (written by CMake to <build>/stoker_layering.txt) has no cycle;
  - a stage's sources and headers include `stoker/<other>/...` only for stages it links
    (directly or through another stage), and never another stage's private headers: every
    quoted include that is not `stoker/...` must resolve inside the stage's own folder;
  - no stage's CMakeLists.txt adds another stage's src/ to an include path;
  - inside a stage whose src/ is split into folders (FOLDER_ORDER), a file includes only headers of
    its own folder or of folders listed before it: the folders are layers too.
"""
import argparse
import pathlib
import re
import sys

FOLDERS = {  # stage -> folder
    "core": "core", "cache": "cache", "pipeline": "pipeline", "augment": "augment",
    "trainer": "trainer", "training": "training",
}
# The folders of a stage's src/, lowest first (docs/architecture.md, "The models side").
FOLDER_ORDER = {
    "trainer": ["ops", "graph", "import", "plan", "cpu", "twin", "cuda", "fine_tune", "head"],
}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def read_graph(path):
    deps = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if not line.strip():
            continue
        stage, _, links = line.partition(":")
        deps[stage] = {m for m in re.findall(r"stoker(?:::|_)(\w+)", links) if m in FOLDERS and m != stage}
    return deps


def find_cycle(deps):
    state = {}

    def visit(node, path):
        state[node] = "open"
        for d in sorted(deps.get(node, ())):
            if state.get(d) == "open":
                return path + [node, d]
            if d not in state:
                found = visit(d, path + [node])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(deps):
        if node not in state:
            found = visit(node, [])
            if found:
                return found[found.index(found[-1]):]
    return None


def reachable(deps, stage):
    seen, todo = {stage}, [stage]
    while todo:
        for d in deps.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def stage_files(source, stage):
    for p in sorted((source / FOLDERS[stage]).rglob("*")):
        if p.suffix in {".hpp", ".cpp", ".cu", ".cuh", ".h"}:
            yield p


def folder_of(src, path, order):
    """The folder of `order` that `path` lies in under src/, None outside src/."""
    try:
        parts = path.resolve().relative_to(src.resolve()).parts
    except ValueError:
        return None
    if len(parts) < 2 or parts[0] not in order:
        return "(src/ itself)"
    return parts[0]


def folder_order_problem(src, order, including, included):
    mine, theirs = folder_of(src, including, order), folder_of(src, included, order)
    if mine is None or theirs is None:
        return None
    if "(src/ itself)" in (mine, theirs):
        where = including if mine == "(src/ itself)" else included
        return f"{where.name} is not in one of the folders {order}"
    if order.index(theirs) > order.index(mine):
        return f"{mine}/ includes {theirs}/{included.name}, a folder above it ({' < '.join(order)})"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--source", required=True)
    args = ap.parse_args()
    source = pathlib.Path(args.source).resolve()
    deps = read_graph(args.graph)
    problems = []
    missing = set(FOLDERS) - set(deps)
    if missing:
        problems.append(f"stages missing from {args.graph}: {sorted(missing)}")
    cycle = find_cycle(deps)
    if cycle:
        problems.append("the stages' link graph has a cycle: " + " -> ".join(cycle))

    for stage in FOLDERS:
        allowed = reachable(deps, stage)
        root = source / FOLDERS[stage]
        for f in stage_files(source, stage):
            for kind, name in INCLUDE.findall(f.read_text(errors="replace")):
                rel = f.relative_to(source)
                m = re.match(r"stoker/(\w+)/", name)
                if m and m.group(1) in FOLDERS:
                    if m.group(1) not in allowed:
                        problems.append(f"{rel}: includes <{name}>, but stoker::{stage} does not link stoker::{m.group(1)}")
                    continue
                if kind != '"':
                    continue
                candidates = [f.parent / name, root / "src" / name, root / "include" / name]
                hit = next((c for c in candidates if c.exists()), None)
                if hit is None or root.resolve() not in hit.resolve().parents:
                    problems.append(f'{rel}: includes "{name}", which is not a header of stoker::{stage}')
                elif stage in FOLDER_ORDER:
                    problem = folder_order_problem(root / "src", FOLDER_ORDER[stage], f, hit)
                    if problem:
                        problems.append(f"{rel}: {problem}")
        cmake = root / "CMakeLists.txt"
        for other, folder in FOLDERS.items():
            if other != stage and re.search(rf"{re.escape(folder)}/src", cmake.read_text()):
                problems.append(f"{cmake.relative_to(source)}: reaches into {folder}/src (private to stoker::{other})")

    for p in problems:
        print("layering:", p)
    if not problems:
        print("layering: ok;", ", ".join(f"{s} -> {sorted(d) or '-'}" for s, d in sorted(deps.items())))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
