"""Okapi BM25 over tantivy: an inverted index on disk (or in memory) that the OS pages in, searched with block-max
WAND; documents are row numbers and texts, it knows no passage, file format or server.

Two stages. tantivy finds candidates, by the query's rarer words where they match enough documents (see
COMMON_SHARE): words are runs of letters and digits, lower-cased, without English stopwords and one-character words,
scored with its fixed k1 = 1.2, b = 0.75. `okapi` then scores the candidates exactly as the
in-memory bm25s index this engine replaced did (its words, k1 = 1.5, b = 0.75, Lucene's idf
log(1 + (N − n + 0.5) / (n + 0.5)), each query word as often as it occurs), so rankings and scores stay what they were.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TEXT, ROW = "text", "row"
ANALYZER = "inspo_en"
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    ]
)
"""Lucene's English stopwords (the list bm25s's `stopwords="en"` uses)."""
MAX_WORD = 255
"""Longer words are dropped when indexing and querying (tantivy refuses terms of 64 KiB)."""
MAX_QUERY_WORDS = 64
"""A query's distinct words beyond these are ignored: a pasted page must not cost a search of every posting list."""
_WORD = re.compile(r"[^\W_]+")
_BM25S_WORD = re.compile(r"(?u)\b\w\w+\b")
K1, B = 1.5, 0.75
CANDIDATES = 10
"""tantivy's candidates per result wanted (at least 20), re-scored by `okapi`."""
COMMON_SHARE = 0.5
"""A query word found in more than half of the documents does not choose candidates (its idf is below 0.7, where a
rare word's is 10 or more) unless the others match too few; `okapi` still scores every word. Such a word is in
almost every posting block, so block-max WAND cannot skip it. At 1M synthetic passages (bench/retrieval.py's
queries, 200 of them) a search took 5.8 ms (p50) and 10.8 ms (p95) instead of 10.9 and 24.9, and 196 of the 200
top-3 were those that candidates chosen by every word give."""


def words(text: str) -> list[str]:
    """bm25s's English words of a text, repeats kept.

    >>> words("The capital of Peru is Lima; Lima is a city.")
    ['capital', 'peru', 'lima', 'lima', 'city']
    """
    return [w for w in _BM25S_WORD.findall(text.lower()) if w not in STOPWORDS]


def query_words(text: str) -> list[str]:
    """The distinct words of a query as the index holds them, in order.

    >>> query_words("What is the capital of Peru? The CAPITAL, I mean.")
    ['what', 'capital', 'peru', 'mean']
    """
    words = (w for w in _WORD.findall(text.lower()) if 1 < len(w) <= MAX_WORD and w not in STOPWORDS)
    return list(dict.fromkeys(words))[:MAX_QUERY_WORDS]


def _schema() -> Any:
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field(TEXT, stored=False, tokenizer_name=ANALYZER, index_option="freq")
    builder.add_integer_field(ROW, stored=False, fast=True, indexed=False)
    return builder.build()


def _analyzer() -> Any:
    import tantivy

    dropped = sorted(STOPWORDS | set(string.ascii_lowercase) | set(string.digits))
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(MAX_WORD + 1))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.custom_stopword(dropped))
        .build()
    )


class BM25Writer:
    """Adds (row, text) documents to a new or partly built index; `commit` makes what was added durable, so a build
    that stops can go on from `committed` documents (see `open_for_resume`)."""

    def __init__(self, folder: Path | None, *, heap_mb: int = 512, threads: int = 2) -> None:
        import tantivy

        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(_schema(), path=None if folder is None else str(folder), reuse=True)
        self.index.register_tokenizer(ANALYZER, _analyzer())
        self.index.reload()
        self.committed = self.index.searcher().num_docs
        self._writer = self.index.writer(heap_mb * 1_000_000, num_threads=threads)
        self._document = tantivy.Document

    def add(self, row: int, text: str) -> None:
        document = self._document()
        document.add_integer(ROW, row)
        document.add_text(TEXT, text)
        self._writer.add_document(document)

    def commit(self) -> None:
        self._writer.commit()
        self.index.reload()
        self.committed = self.index.searcher().num_docs

    def finish(self) -> BM25Index:
        self.commit()
        self._writer.wait_merging_threads()
        return BM25Index(self.index)

    def abandon(self) -> None:
        """Drop what was added since the last commit and stop the writer's threads."""
        self._writer.rollback()
        self._writer.wait_merging_threads()


class BM25Index:
    """Searches an index: top-k rows and their BM25 scores per query. Safe to share between threads."""

    def __init__(self, index: Any) -> None:
        import tantivy

        self.index = index
        self.index.register_tokenizer(ANALYZER, _analyzer())
        self._schema = index.schema
        self._tantivy = tantivy
        self.searcher = index.searcher()

    @classmethod
    def open(cls, folder: Path) -> BM25Index:
        import tantivy

        return cls(tantivy.Index.open(str(folder)))

    def __len__(self) -> int:
        return int(self.searcher.num_docs)

    def search(self, queries: Sequence[str], k: int) -> list[list[tuple[int, float]]]:
        """Per query, up to `k` (row, score) pairs, best first; a query without a word finds nothing."""
        return [self._one(query, k) for query in queries]

    def okapi(self, query: str, texts: Sequence[str], average_length: float) -> list[float]:
        """Each text's exact Okapi BM25 score for `query` against this index's document frequencies."""
        asked = words(query)
        total = len(self)
        idf = {}
        for word in set(asked):
            frequency = int(self.searcher.doc_freq(TEXT, word)) if len(word) <= MAX_WORD else 0
            idf[word] = math.log(1 + (total - frequency + 0.5) / (frequency + 0.5))
        scores = []
        for text in texts:
            counts = Counter(words(text))
            norm = K1 * (1 - B + B * sum(counts.values()) / max(average_length, 1e-9))
            scores.append(sum(idf[w] * counts[w] / (counts[w] + norm) for w in asked if counts[w]))
        return scores

    def _one(self, query: str, k: int) -> list[tuple[int, float]]:
        words = query_words(query)
        if not words:
            return []
        common = COMMON_SHARE * len(self)
        rare = [w for w in words if self.searcher.doc_freq(TEXT, w) <= common]
        hits = self._hits(rare, k) if rare and len(rare) < len(words) else []
        if len(hits) < k:  # the rare words match too few documents: every word chooses
            hits = self._hits(words, k)
        rows = self.searcher.fast_field_values(ROW, [address for _, address in hits])
        # equal scores: the lower row first, as an exhaustive ranking by (score, row) would give
        ranked = sorted(zip(rows, (score for score, _ in hits), strict=True), key=lambda hit: (-hit[1], hit[0]))
        return [(int(row), float(score)) for row, score in ranked]

    def _hits(self, words: list[str], k: int) -> list[tuple[float, Any]]:
        tantivy = self._tantivy
        should = tantivy.Occur.Should
        clauses = [(should, tantivy.Query.term_query(self._schema, TEXT, word)) for word in words]
        return list(self.searcher.search(tantivy.Query.boolean_query(clauses), k, count=False).hits)
