"""The reachability check's corpus scan, measured: how fast `reached_anywhere` reads a corpus for the answers of a
question set (the part that grows with the corpus; the top-k part is the retriever's searches).

    .venv/bin/python bench/reach.py [--passages 200000] [--questions 10000] [--work /tmp/inspo-reach-bench]

Synthetic and seeded: passages of a title line and 100 words over 50,000 made-up words, drawn uniformly or from a
Zipf law (1/rank); questions of three gold answers of 1-4 words each, drawn uniformly from the same words. The
corpora are written once under --work and read back as a check reads them (JSON lines, normalised as exact match
normalises). Prints one line per corpus: seconds, passages a second, questions reached.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import time
from pathlib import Path

from inspo_engine.env.reach import corpus_passages, reached_anywhere
from inspo_engine.types import Question


def write_corpus(path: Path, passages: int, words: list[str], weights: list[float] | None, seed: int) -> None:
    if path.exists():
        return
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(passages):
            text = " ".join(rng.choices(words, cum_weights=weights, k=100))
            handle.write(json.dumps({"id": str(i), "contents": f'"T{i}"\n{text}'}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=200_000)
    parser.add_argument("--questions", type=int, default=10_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/inspo-reach-bench"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    words = [f"w{i}" for i in range(50_000)]
    zipf = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(words))))
    rng = random.Random(0)
    questions = [
        Question(str(i), "q", tuple(" ".join(rng.choices(words, k=rng.randint(1, 4))) for _ in range(3)))
        for i in range(args.questions)
    ]
    for name, weights in (("uniform", None), ("zipf", zipf)):
        path = args.work / f"corpus-{name}-{args.passages}.jsonl"
        write_corpus(path, args.passages, words, weights, seed=1)
        start = time.perf_counter()
        found = reached_anywhere(questions, corpus_passages(path))
        took = time.perf_counter() - start
        size = path.stat().st_size / 1e6
        print(
            f"{name}: {args.questions:,} questions, {args.passages:,} passages ({size:.0f} MB): {took:.1f} s, "
            f"{args.passages / took:,.0f} passages/s, {sum(found):,} reached"
        )


if __name__ == "__main__":
    main()
