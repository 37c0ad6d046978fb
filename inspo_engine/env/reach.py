"""Reachability of a question set before a run: the share whose gold answer the retriever's top-k passages hold for
the question text itself, and the share whose answer the corpus holds anywhere; it knows no model, job or web app.

"Holds" is the exact-match reward's test turned on passages: an answer, normalised as `normalize_answer` normalises
it (lower case, no punctuation or articles), appears in the normalised passage as a run of whole words, as
`retrieved_gold` reads an `<information>` block. A question whose answers all normalise to nothing is reached
nowhere.

Finding the answers anywhere reads the corpus from disk once, whatever the number of questions: every answer
becomes a tuple of words in a set of its length, and each passage's n-grams of those lengths are looked up in them
(a token n-gram set lookup, up to the longest answer's length; see `AnswerFinder`). The work is linear in the
corpus's words times the distinct answer lengths, never answers × passages.
"""

from __future__ import annotations

import re
import string
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inspo_engine.env.protocol import Passage, Retriever
from inspo_engine.env.rewards import normalize_answer
from inspo_engine.env.store import scan_corpus
from inspo_engine.types import Question

SEARCH_BATCH = 256
"""Questions sent to the retriever in one call (the retrieval service takes up to 1,024 a request)."""
PROGRESS_EVERY = 20_000
"""Passages between two progress reports of the corpus scan."""
_PUNCTUATION = str.maketrans("", "", string.punctuation)
"""What `normalize_answer` deletes (see `passage_words`)."""
_ARTICLE_WORDS = frozenset({"a", "an", "the"})
_CONTROL = re.compile("[\x00-\x08\x0e-\x1b\x7f]")
"""The ASCII characters that are neither a word's nor white space once the punctuation is gone: next to one, dropping
articles by word would differ from `normalize_answer`'s regular expression."""
EXAMPLES = 5
"""Questions of each kind a result keeps as examples."""

Progress = Callable[[str, int, int], None]
"""(stage, done, total): stage "search" counts questions, "scan" passages (total: the corpus's lines, or 0 when
unknown). It may raise to stop the work."""


def answer_words(answer: str) -> tuple[str, ...]:
    """An answer as the exact-match reward compares it, in words.

    >>> answer_words("The  Eiffel-Tower!")
    ('eiffeltower',)
    >>> answer_words("the")
    ()
    """
    return tuple(normalize_answer(answer).split())


def passage_words(passage: Passage) -> list[str]:
    """A passage's title and text as the agent sees them, normalised into words: `normalize_answer(...).split()`,
    with a faster path for ASCII text (most of a corpus) that gives the same words. After the punctuation is gone,
    ASCII text holds only letters, digits, white space and control characters, so outside the control characters
    that are not white space, an article the EM normalisation drops is exactly a word equal to one.

    >>> passage_words(Passage("1", "The Louvre", "A museum in Paris; an old palace."))
    ['louvre', 'museum', 'in', 'paris', 'old', 'palace']
    >>> passage_words(Passage("1", "", "café—the end")) == normalize_answer("café—the end").split()
    True
    """
    text = f"{passage.title} {passage.text}"
    lowered = text.lower().translate(_PUNCTUATION)
    if lowered.isascii() and not _CONTROL.search(lowered):
        return [word for word in lowered.split() if word not in _ARTICLE_WORDS]
    return normalize_answer(text).split()


def holds(words: Sequence[str], answer: tuple[str, ...]) -> bool:
    """Whether `answer` is a run of whole words of `words`.

    >>> holds("lima is the capital".split(), ("lima",)), holds("limassol port".split(), ("lima",))
    (True, False)
    >>> holds("new york city".split(), ("york", "city")), holds([], ())
    (True, False)
    """
    if not answer:
        return False
    n = len(answer)
    return any(tuple(words[i : i + n]) == answer for i, word in enumerate(words) if word == answer[0])


@dataclass(frozen=True)
class Reachability:
    """How many of `questions` are reached in the top `k` and anywhere, with a few ids of each shortfall."""

    questions: int
    k: int
    topk: int
    anywhere: int
    nowhere_examples: list[str] = field(default_factory=list)
    """Questions whose answer the corpus holds nowhere."""
    missed_examples: list[str] = field(default_factory=list)
    """Questions whose answer the corpus holds, but not the top k passages for the question."""

    @property
    def topk_share(self) -> float:
        return self.topk / self.questions if self.questions else 0.0

    @property
    def anywhere_share(self) -> float:
        return self.anywhere / self.questions if self.questions else 0.0

    def line(self) -> str:
        """The summary a checker reads.

        >>> Reachability(questions=8, k=3, topk=3, anywhere=5).line()
        'reachable_topk=0.375 reachable_anywhere=0.625'
        """
        return f"reachable_topk={_share(self.topk_share)} reachable_anywhere={_share(self.anywhere_share)}"


def _share(value: float) -> str:
    """A share as a short decimal.

    >>> _share(0.625), _share(1.0), _share(0.0), _share(2 / 3)
    ('0.625', '1', '0', '0.6667')
    """
    return f"{value:.4f}".rstrip("0").rstrip(".")


def reached_in_topk(
    questions: Sequence[Question],
    retriever: Retriever,
    k: int,
    *,
    batch: int = SEARCH_BATCH,
    progress: Progress | None = None,
) -> list[bool]:
    """Per question, whether the top `k` passages retrieved for its own text hold one of its answers; the questions
    go to the retriever `batch` at a time."""
    reached: list[bool] = []
    for start in range(0, len(questions), batch):
        chunk = questions[start : start + batch]
        for question, passages in zip(chunk, retriever.search([q.text for q in chunk], k), strict=True):
            answers = [answer_words(a) for a in question.golden_answers]
            texts = [passage_words(passage) for passage in passages[:k]]
            reached.append(any(holds(words, answer) for words in texts for answer in answers))
        if progress is not None:
            progress("search", len(reached), len(questions))
    return reached


class AnswerFinder:
    """Every answer of a question set, looked up in passages one at a time: `feed` each passage, then `found` says
    which questions had an answer in any of them. The answers not seen yet are kept as sets of word tuples, one set
    per length; a passage's n-grams of each such length are streamed against the set of that length
    (`set.intersection` over a `zip` of the word list, both in C). A passage costs its words × the number of
    distinct answer lengths still looked for, whatever the number of answers."""

    def __init__(self, questions: Sequence[Question]) -> None:
        self._owners: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for index, question in enumerate(questions):
            for answer in {answer_words(a) for a in question.golden_answers}:
                if answer:
                    self._owners[answer].append(index)
        self._by_length: dict[int, set[tuple[str, ...]]] = {}
        for answer in self._owners:
            self._by_length.setdefault(len(answer), set()).add(answer)
        self.found = [False] * len(questions)

    @property
    def done(self) -> bool:
        """Whether every answer has been seen (the rest of a corpus cannot change the result)."""
        return not self._owners

    def feed(self, words: list[str]) -> None:
        for n, remaining in list(self._by_length.items()):
            if n <= len(words):
                for answer in remaining.intersection(zip(*(words[i:] for i in range(n)), strict=False)):
                    self._seen(answer)

    def _seen(self, answer: tuple[str, ...]) -> None:
        for index in self._owners.pop(answer):
            self.found[index] = True
        remaining = self._by_length[len(answer)]
        remaining.discard(answer)
        if not remaining:
            del self._by_length[len(answer)]


def reached_anywhere(
    questions: Sequence[Question],
    passages: Iterable[Passage],
    *,
    total: int = 0,
    progress: Progress | None = None,
) -> list[bool]:
    """Per question, whether any of `passages` holds one of its answers; the passages are read once, in order, and
    the reading stops early once every answer has been seen."""
    finder = AnswerFinder(questions)
    done = 0
    for done, passage in enumerate(passages, start=1):
        finder.feed(passage_words(passage))
        if progress is not None and done % PROGRESS_EVERY == 0:
            progress("scan", done, total)
        if finder.done:
            break
    if progress is not None:
        progress("scan", done, max(total, done))
    return finder.found


def corpus_passages(corpus: Path) -> Iterable[Passage]:
    """A FlashRAG corpus file's passages, streamed from disk."""
    return (passage for _, _, passage in scan_corpus(corpus))


def reachability(
    questions: Sequence[Question],
    corpus: Path,
    retriever: Retriever,
    k: int,
    *,
    corpus_lines: int = 0,
    batch: int = SEARCH_BATCH,
    progress: Progress | None = None,
) -> Reachability:
    """Both shares of `questions` over the corpus file that `retriever` searches (`corpus_lines`: its lines, for
    progress)."""
    topk = reached_in_topk(questions, retriever, k, batch=batch, progress=progress)
    anywhere = reached_anywhere(questions, corpus_passages(corpus), total=corpus_lines, progress=progress)
    nowhere = [q.id for q, found in zip(questions, anywhere, strict=True) if not found]
    missed = [q.id for q, found, top in zip(questions, anywhere, topk, strict=True) if found and not top]
    return Reachability(
        questions=len(questions),
        k=k,
        topk=sum(topk),
        anywhere=sum(anywhere),
        nowhere_examples=nowhere[:EXAMPLES],
        missed_examples=missed[:EXAMPLES],
    )
