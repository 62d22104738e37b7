"""Retrieval over the corpus: a BM25 index (bm25s) built once per domain, and the `search`/`lookup` tools a
harness calls, with their arguments checked and their results capped."""

from __future__ import annotations

from typing import Any

from whale.domains.searchqa.corpus import (
    Document,
)
from whale.domains.searchqa.text import tokenize
from whale.harness.task import ToolError

MAX_K = 10


MAX_QUERY_CHARS = 500


MAX_TITLE_CHARS = 300


MAX_RESULT_CHARS = 2000


class SearchIndex:
    """BM25 over `title + text` of each document; ties broken by corpus order, so results are stable."""

    def __init__(self, documents: list[Document]):
        import bm25s  # deferred: importing whale.domains.searchqa.domain should stay cheap

        if not documents:
            raise ValueError("searchqa corpus is empty")
        self.documents = documents
        self.by_title: dict[str, Document] = {}
        self.by_folded_title: dict[str, Document] = {}
        for d in documents:
            self.by_title.setdefault(d.title, d)
            self.by_folded_title.setdefault(" ".join(d.title.lower().split()), d)
        self.bm25 = bm25s.BM25()
        self.bm25.index([tokenize(f"{d.title} {d.text}") for d in documents], show_progress=False)

    def search(self, query: str, k: int) -> list[Document]:
        ids = self.bm25.get_tokens_ids(tokenize(query))
        if not ids:
            return []
        import numpy as np

        scores = self.bm25.get_scores_from_ids(ids)
        order = np.argsort(-scores, kind="stable")[:k]
        return [self.documents[i] for i in order if scores[i] > 0]

    def lookup(self, title: str) -> Document | None:
        return self.by_title.get(title) or self.by_folded_title.get(" ".join(title.lower().split()))


def bind(signature: str, params: tuple[tuple[str, Any], ...], args: list, kwargs: dict) -> dict[str, Any]:
    """Match positional and keyword arguments to `params` ((name, default) pairs; REQUIRED has none)."""
    names = [name for name, _ in params]
    if len(args) > len(params):
        raise ToolError(f"too many arguments; call it as {signature}")
    values = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names:
            raise ToolError(f"unexpected argument {str(key)[:40]!r}; call it as {signature}")
        if key in values:
            raise ToolError(f"argument {key!r} given twice; call it as {signature}")
        values[key] = value
    for name, default in params:
        if name not in values:
            if default is REQUIRED:
                raise ToolError(f"missing argument {name!r}; call it as {signature}")
            values[name] = default
    return values


REQUIRED = object()


SEARCH_SIGNATURE = "search(query: str, k: int = 3)"


LOOKUP_SIGNATURE = "lookup(title: str)"


class SearchToolbox:
    """search(query, k=3) -> [{"title", "text"}, ...]; lookup(title) -> text; stateless, shares the index."""

    names = ("search", "lookup")

    def __init__(self, index: SearchIndex):
        self.index = index

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name == "search":
            values = bind(SEARCH_SIGNATURE, (("query", REQUIRED), ("k", 3)), args, kwargs)
            return self.search(values["query"], values["k"])
        if name == "lookup":
            values = bind(LOOKUP_SIGNATURE, (("title", REQUIRED),), args, kwargs)
            return self.lookup(values["title"])
        raise ToolError(f"unknown tool {str(name)[:40]!r}; available: search, lookup")

    def search(self, query: Any, k: Any = 3) -> list[dict[str, str]]:
        if not isinstance(query, str):
            raise ToolError(f"search: query must be a string, got {type(query).__name__}")
        if not query.strip():
            raise ToolError("search: empty query")
        if len(query) > MAX_QUERY_CHARS:
            raise ToolError(f"search: query longer than {MAX_QUERY_CHARS} characters")
        if not isinstance(k, int) or isinstance(k, bool):
            raise ToolError(f"search: k must be an integer, got {type(k).__name__}")
        if k < 1:
            raise ToolError(f"search: k must be at least 1, got {k}")
        hits = self.index.search(query, min(k, MAX_K))
        return [{"title": d.title, "text": d.text[:MAX_RESULT_CHARS]} for d in hits]

    def lookup(self, title: Any) -> str:
        if not isinstance(title, str):
            raise ToolError(f"lookup: title must be a string, got {type(title).__name__}")
        if not title.strip() or len(title) > MAX_TITLE_CHARS:
            raise ToolError(f"lookup: title must be 1..{MAX_TITLE_CHARS} characters")
        doc = self.index.lookup(title)
        if doc is None:
            raise ToolError(f"lookup: no document titled {title[:80]!r}; use search to find titles")
        return doc.text[:MAX_RESULT_CHARS]
