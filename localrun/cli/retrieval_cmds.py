"""``localrun embed`` and ``localrun rerank``: try a retrieval model from the terminal.

``embed MODEL TEXT...`` prints one JSON array per text (pipe it anywhere); ``rerank MODEL QUERY
DOC...`` prints the documents best first with their scores. Either reads its texts from standard
input, one per line, when none are given. Both start the daemon when none answers (as ``run`` does).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import InvalidRequest
from ..jsontypes import JSONObject, JSONValue, as_number
from .connect import ensure_daemon

PREVIEW = 72  # characters of a document shown in rerank's table


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    e = subparsers.add_parser("embed", help="print the embedding of each text (one JSON array a line)")
    e.add_argument("model", help="an embedding model, e.g. nomic-embed-text")
    e.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed (default: each line of stdin)")
    e.add_argument("--no-truncate", action="store_true", help="refuse a text over the model's context")
    e.set_defaults(func=embed)
    r = subparsers.add_parser("rerank", help="order documents by relevance to a query")
    r.add_argument("model", help="a reranking model, e.g. bge-reranker-v2-m3")
    r.add_argument("query", help="what the documents are ranked against")
    r.add_argument("documents", nargs="*", metavar="DOC", help="documents (default: each line of stdin)")
    r.add_argument("--top-n", type=int, default=None, help="show only the best N")
    r.set_defaults(func=rerank)


def _texts(given: list[str], what: str) -> list[str]:
    if given:
        return given
    if sys.stdin.isatty():
        raise InvalidRequest(f"give the {what} as arguments, or pipe them in one a line")
    lines = [line.rstrip("\n") for line in sys.stdin]
    texts = [line for line in lines if line.strip()]
    if not texts:
        raise InvalidRequest(f"no {what} on standard input")
    return texts


def embed(args: argparse.Namespace) -> int:
    texts = _texts(args.texts, "texts")
    with ensure_daemon() as client:
        reply = client.embed(args.model, texts, truncate=not args.no_truncate)
    print_embeddings(reply)
    return 0


def print_embeddings(reply: JSONObject) -> None:
    """An ``/api/embed`` reply as one JSON array a line on stdout, and which texts were cut on stderr."""
    vectors = reply.get("embeddings")
    for vector in vectors if isinstance(vectors, list) else []:
        print(json.dumps(vector))
    _say_cut(reply.get("truncated"), "text")


def rerank(args: argparse.Namespace) -> int:
    documents = _texts(args.documents, "documents")
    with ensure_daemon() as client:
        reply = client.rerank(args.model, args.query, documents, top_n=args.top_n)
    results = reply.get("results")
    rows = [("RANK", "SCORE", "DOC", "TEXT")]
    for rank, item in enumerate(results if isinstance(results, list) else [], 1):
        if not isinstance(item, dict):
            continue
        index = int(as_number(item.get("index")) or 0)
        text = " ".join(documents[index].split()) if 0 <= index < len(documents) else ""
        cut = text if len(text) <= PREVIEW else text[: PREVIEW - 3] + "..."
        rows.append((str(rank), f"{as_number(item.get('relevance_score')) or 0.0:.4f}", str(index), cut))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[3]]).rstrip())
    meta = reply.get("meta")
    warnings = meta.get("warnings") if isinstance(meta, dict) else None
    for warning in warnings if isinstance(warnings, list) else []:
        print(f"Note: {warning}", file=sys.stderr)
    return 0


def _say_cut(indices: JSONValue, what: str) -> None:
    if isinstance(indices, list) and indices:
        print(f"Note: {what}s {', '.join(str(i) for i in indices)} were cut to fit the model's context",
              file=sys.stderr)
