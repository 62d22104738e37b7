"""Text normalisation shared by retrieval and scoring: tokens, stop words, SQuAD-style answer
normalisation, exact match and token F1."""

from __future__ import annotations

import re
import string
from collections import Counter

ARTICLES = re.compile(r"\b(a|an|the)\b")


PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace (SQuAD's normalisation)."""
    text = str(text).lower().translate(PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def exact_match(prediction: str | None, golds: list[str]) -> float:
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return 1.0 if any(pred == normalize_answer(g) for g in golds) else 0.0


def token_f1(prediction: str | None, golds: list[str] | str) -> float:
    """The best SQuAD token F1 of `prediction` against any gold answer (0.0 for no prediction)."""
    if prediction is None:
        return 0.0
    if isinstance(golds, str):
        golds = [golds]
    pred = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        ref = normalize_answer(gold).split()
        if not pred or not ref:
            best = max(best, float(pred == ref))
            continue
        common = sum((Counter(pred) & Counter(ref)).values())
        if common:
            precision, recall = common / len(pred), common / len(ref)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def contains(text: str, answer: str) -> bool:
    """Whether the normalised `answer` occurs in the normalised `text` as whole words."""
    needle = normalize_answer(answer)
    return bool(needle) and f" {needle} " in f" {normalize_answer(text)} "


# bm25s's English stopwords plus question words, so a question used as a query matches on its content.
STOPWORDS = frozenset(
    (
        "a an and are as at be but by for if in into is it no not of on or such that the their then there "
        "these they this to was will with what which who whom whose where when how did does do were"
    ).split()
)

TOKEN = re.compile(r"[^\W_]+")


def tokenize(text: str) -> list[str]:
    """Lowercase, split on anything not a letter or digit, drop stopwords."""
    return [t for t in TOKEN.findall(text.lower()) if t not in STOPWORDS]
