"""Cut the operations the contract tests need out of a vendor's published OpenAPI document.

    python -P tools/extract_openapi.py --git-dir MIRROR --repository stripe/openapi \
        --commit 63a674638635c68de26b9f3add13e58198f4df44 --path openapi/spec3.yaml \
        --operation "POST /v1/payment_intents" ... --keep-schema payment_intent ... \
        --out tests/contracts/stripe.openapi.json

The source is read from a git checkout or mirror at the named commit (`git show COMMIT:PATH`),
never edited: the selected path items and every schema, parameter and response they reference
are copied verbatim. With `--keep-schema`, only the named component schemas are copied, and a
reference to any other schema becomes `{"x-not-extracted": ref, "not": {}}`, which refuses every
value: a field the excerpt does not describe must be absent or null, never guessed at. The
output starts with `x-source` (repository, commit, path, the document's own version), so the
excerpt says where it came from; re-running the command reproduces it byte for byte.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def load(git_dir: str, commit: str, path: str) -> dict[str, Any]:
    raw = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                         capture_output=True, check=True).stdout
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    document: dict[str, Any] = (json.loads(raw) if path.endswith(".json")
                                else yaml.load(raw, Loader=loader))
    return document


def _refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            out.add(ref)
        for value in node.values():
            _refs(value, out)
    elif isinstance(node, list):
        for value in node:
            _refs(value, out)


def _resolve(document: dict[str, Any], ref: str) -> Any:
    if not ref.startswith("#/"):
        raise SystemExit(f"external reference {ref!r} is not supported")
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _prune(node: Any, keep: set[str] | None) -> Any:
    """Copy `node`, replacing references to schemas outside `keep` (None: keep all)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if (keep is not None and isinstance(ref, str) and ref.startswith("#/components/schemas/")
                and ref.rsplit("/", 1)[1] not in keep):
            return {"x-not-extracted": ref, "not": {}}
        return {key: _prune(value, keep) for key, value in node.items()}
    if isinstance(node, list):
        return [_prune(value, keep) for value in node]
    return node


def extract(document: dict[str, Any], operations: list[str],
            keep: set[str] | None) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for operation in operations:
        method, _, path = operation.partition(" ")
        method = method.lower()
        item = document.get("paths", {}).get(path)
        if item is None or method not in item:
            raise SystemExit(f"{operation!r} is not in the document")
        target = paths.setdefault(path, {k: v for k, v in item.items() if k not in METHODS})
        target[method] = item[method]
    paths = _prune(paths, keep)
    components: dict[str, dict[str, Any]] = {}
    todo: set[str] = set()
    _refs(paths, todo)
    done: set[str] = set()
    while todo:
        ref = todo.pop()
        if ref in done:
            continue
        done.add(ref)
        _, _, kind, name = ref.split("/", 3)
        node = _prune(_resolve(document, ref), keep)
        components.setdefault(kind, {})[name] = node
        _refs(node, todo)
    return {"paths": paths,
            "components": {k: dict(sorted(v.items())) for k, v in sorted(components.items())}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", required=True, help="a clone or mirror of the repository")
    parser.add_argument("--repository", required=True, help="owner/name, recorded in x-source")
    parser.add_argument("--commit", required=True)
    parser.add_argument("--path", required=True, help="the document's path in the repository")
    parser.add_argument("--operation", action="append", required=True,
                        help='"METHOD /path", as written in the document (repeat)')
    parser.add_argument("--keep-schema", action="append",
                        help="copy only these component schemas (repeat); others are refused")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    document = load(args.git_dir, args.commit, args.path)
    excerpt = extract(document, args.operation,
                      set(args.keep_schema) if args.keep_schema else None)
    header = {"x-source": {
        "repository": args.repository, "commit": args.commit, "path": args.path,
        "version": str(document.get("info", {}).get("version", "")),
        "extracted-by": "tools/extract_openapi.py",
        "operations": args.operation, "kept-schemas": sorted(args.keep_schema or []),
    }, "openapi": document.get("openapi") or document.get("swagger"),
        "info": {"title": document.get("info", {}).get("title", ""),
                 "version": str(document.get("info", {}).get("version", ""))}}
    Path(args.out).write_text(json.dumps({**header, **excerpt}, indent=1, sort_keys=False) + "\n")
    size = Path(args.out).stat().st_size
    print(f"{args.out}: {len(args.operation)} operations, "
          f"{sum(len(v) for v in excerpt['components'].values())} components, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
