"""Reranking: ``POST /v1/rerank`` (also ``/rerank``, ``/v1/reranking``, ``/reranking`` and Cohere's
``/v2/rerank``), in the shape llama-server, Jina and Cohere share.

Request: ``{model, query, documents, top_n?, return_documents?, truncate?}``; a document is a string
or an object with a ``text`` string (Jina's and Cohere's object form). Reply: ``{id, model, object,
results: [{index, relevance_score, document?: {text}}], usage: {prompt_tokens, total_tokens}}`` with
the results sorted by score, best first, cut to ``top_n``. ``relevance_score`` is the model's own
score, as llama-server reports it (a logit for BERT-style cross-encoders, a probability for
Qwen3-Reranker): the order is what matters. Documents come back with their text unless the request
says ``return_documents: false`` (Jina's and Cohere v1's default; Cohere's ``/v2/rerank`` returns
them only when asked). A document cut to fit the model's context is named in ``meta.warnings``
(Cohere's field); ``truncate: false`` makes it a 400 instead.

A local model that is not a reranker is a 400 (``Target.require``). An upstream model (``NAME/model``)
is scored by a ``/v1`` member of its pool (llama-server ``--rerank``, vLLM, another localrun), and the
reply is written here from its scores, the same way; a pool that speaks only Ollama's API, which has
no reranking, is a 400.
"""

from __future__ import annotations

import math
import uuid

from aiohttp import web

from .. import errors
from ..engine import limits
from ..engine.types import RerankResult
from ..jsontypes import JSONObject, JSONValue
from ..modelkind import ModelKind
from ..upstream.openai_api import CUT_WARNING
from . import remote
from .chat import upstream_route
from .http import get, get_whole, json_reply, read_json
from .keys import SERVICE
from .options import parse_keep_alive

PATHS = ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking")
COHERE_V2_PATH = "/v2/rerank"


def documents_of(value: JSONValue) -> list[str]:
    """The request's ``documents`` as texts: strings, or objects with a ``text`` string."""
    if not isinstance(value, list) or not value:
        raise errors.InvalidRequest("'documents' must be a non-empty list of strings")
    limits.check_texts(value, "documents")
    texts: list[str] = []
    for i, doc in enumerate(value):
        if isinstance(doc, dict):
            doc = doc.get("text")
        if not isinstance(doc, str):
            raise errors.InvalidRequest(f"documents[{i}] must be a string or an object with a 'text' string")
        texts.append(doc)
    limits.check_texts(texts, "documents")
    return texts


def ranked(result: RerankResult, documents: list[str], top_n: int, with_documents: bool) -> list[JSONValue]:
    """The results, best score first (ties keep the documents' order), at most ``top_n``. A score
    that is not a number (a broken model's NaN, written as null) ranks last: NaN compares false
    with everything, so sorting by it would leave the order to chance."""
    scores = result.scores
    order = sorted(range(len(scores)), key=lambda i: (math.isnan(scores[i]), -scores[i]))[:top_n]
    out: list[JSONValue] = []
    for i in order:
        item: JSONObject = {"index": i, "relevance_score": result.scores[i]}
        if with_documents:
            item["document"] = {"text": documents[i]}
        out.append(item)
    return out


async def rerank(request: web.Request) -> web.Response:
    body: JSONObject = await read_json(request)
    query = get(body, "query", str, "")
    if not query:
        raise errors.InvalidRequest("'query' must be a non-empty string")
    documents = documents_of(body.get("documents"))
    limits.check_texts([query], "query")
    top_n = get_whole(body, "top_n", 1, limits.MAX_TEXTS) or len(documents)
    with_documents = get(body, "return_documents", bool, request.path != COHERE_V2_PATH)
    truncate = get(body, "truncate", bool, True)
    service = request.app[SERVICE]
    route = upstream_route(service, body.get("model"))
    if route is not None and service.upstreams is not None:
        name, result = route.name, await remote.rerank(service.upstreams, route, query, documents, truncate)
    else:
        target = await service.target(body.get("model"), body.get("options"),
                                      parse_keep_alive(body.get("keep_alive")))
        target.require(ModelKind.RERANK)
        name, (result, _, _) = target.name, await service.rerank(target, query, documents, truncate)
    reply: JSONObject = {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": name,
        "object": "list",
        "results": ranked(result, documents, min(top_n, len(documents)), with_documents),
        "usage": {"prompt_tokens": result.prompt_eval_count, "total_tokens": result.prompt_eval_count},
    }
    cut = [i for i, was in enumerate(result.truncated) if was]
    if cut:
        warnings: list[JSONValue] = [CUT_WARNING.format(i) for i in cut]
        reply["meta"] = {"warnings": warnings}
    return json_reply(reply)


def add_routes(app: web.Application) -> None:
    for path in (*PATHS, COHERE_V2_PATH):
        app.router.add_post(path, rerank)
