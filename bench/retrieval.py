"""Retrieval at the paper's scale, measured: synthetic Wikipedia-shaped corpora (seeded) of 100k, 1M and 5M passages,
indexed and served as the platform does; prints a Markdown table for docs/benchmarks.md.

    .venv/bin/python bench/retrieval.py [--passages N] [--seed 0] [--work /tmp/inspo-retrieval-bench] [--no-dense]

Everything is synthetic: text for BM25, vectors for dense (see 4). A passage is a title line and 100 words drawn
from a Zipf law (s = 1.07) over 500,000 made-up words, the frequent ones short, as in English (about 560 bytes, as a
wiki-18 passage). A query is 6 words of a random passage: queries draw on frequent words, so they are a hard case
for BM25's pruning, not an easy one.

For each size:
1. BM25: the index built as an index job builds it (`build_index`, this process's two cores); its rate and size.
2. The retrieval service in its own processes (`env.service`, as `manage.py retrieval_service` runs it, with
   --workers processes, by default one per core): query latency one at a time (300 queries), in batches of 32 (per
   query), and with 8 concurrent clients (each 60 queries, one at a time); its resident memory after all of them
   (every worker's, pages they share counted once).
3. A run's process as a worker builds it (`make_retriever` with the service) on this corpus and on the built-in one,
   40 searches each: the difference of their peak resident memory is what this corpus costs a run.
4. Dense (unless --no-dense): synthetic unit vectors of 384 dimensions in 256 clusters (no encoder runs: encoding
   5M passages with MiniLM on two cores would take most of a day), the index the platform builds for that many
   passages, query latency one at a time and recall@10 against an exact flat search over the same vectors.

The last line is `N=<n> bm25_build_per_s=<x> bm25_p95_ms=<y> bm25_p95_8clients_ms=<z> service_rss_gb=<g>
run_rss_delta_mb=<m>` for the last size measured.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from inspo_engine.env import indexes  # noqa: E402
from inspo_engine.env.indexes import AnnPlan, CorpusIndex, build_index  # noqa: E402
from inspo_engine.env.service import default_workers  # noqa: E402

SIZES = (100_000, 1_000_000, 5_000_000)
DENSE_PROBES = (32, 64, 128, 256)
"""Probe counts the dense measurement also tries, beside the platform's own (marked in the table)."""
_SYLLABLES = "ka lo mi ne ra to su vi de ban cor tel mar sen pol gri fu ho ze ly a o e".split()  # noqa: SIM905


def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    words: set[str] = set()
    out: list[str] = []
    while len(out) < size:
        word = "".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), int(rng.integers(1, 6))))
        if len(word) > 1 and word not in words:
            words.add(word)
            out.append(word)
    return sorted(out, key=len)  # the frequent words are the short ones


def write_corpus(path: Path, passages: int, seed: int) -> None:
    """A FlashRAG corpus JSONL of `passages` synthetic passages (same seed, same file)."""
    rng = np.random.default_rng(seed)
    words = vocabulary(500_000, rng)
    cdf = np.cumsum(1.0 / np.arange(1, len(words) + 1) ** 1.07)
    cdf /= cdf[-1]
    temporary = path.with_suffix(".tmp")
    with temporary.open("w", encoding="ascii") as handle:
        for start in range(0, passages, 20_000):
            rows = np.searchsorted(cdf, rng.random((min(20_000, passages - start), 102))).tolist()
            lines = []
            for offset, row in enumerate(rows):
                w = [words[i] for i in row]
                title = f"{w[0].capitalize()} {w[1]}"
                lines.append(f'{{"id": "{start + offset}", "contents": "\\"{title}\\"\\n{" ".join(w[2:])}"}}\n')
            handle.write("".join(lines))
    os.replace(temporary, path)


def queries_of(corpus: Path, count: int, seed: int) -> list[str]:
    """`count` queries of 6 words of passages spread over the corpus."""
    rng = random.Random(seed)
    size = corpus.stat().st_size
    out = []
    with corpus.open("rb") as handle:
        while len(out) < count:
            handle.seek(rng.randrange(size))
            handle.readline()
            line = handle.readline()
            if line:
                text = json.loads(line)["contents"].split("\n", 1)[1].split()
                out.append(" ".join(rng.sample(text, 6)))
    return out


def peak_kb(pid: int | str = "self") -> tuple[int, int]:
    """(VmRSS, VmHWM) in kB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


# -- the service -----------------------------------------------------------------------------------------------

_SERVICE = (
    "import sys; from pathlib import Path; from inspo_engine.env.service import IndexShelf, serve; "
    "serve(IndexShelf(Path(sys.argv[1])), '127.0.0.1', 0, workers=int(sys.argv[2]))"
)


def start_service(root: Path, workers: int) -> tuple[subprocess.Popen[str], str]:
    """The service as `manage.py retrieval_service` runs it, its workers included."""
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVICE, str(root), str(workers)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    line = process.stdout.readline()  # type: ignore[union-attr]  # "[retrieval] serving http://host:port/ (…)"
    return process, line.split()[2].rstrip("/")


def timed_searches(url: str, batches: list[list[str]]) -> list[float]:
    """Milliseconds per request, one request after another over one connection."""
    times = []
    with httpx.Client(timeout=60) as client:
        for batch in batches:
            started = time.perf_counter()
            response = client.post(url, json={"queries": batch, "topk": 3, "return_scores": True})
            response.raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
    return times


def _client(job: tuple[str, list[str]]) -> list[float]:
    url, queries = job
    return timed_searches(url, [[q] for q in queries])


def concurrent_searches(url: str, queries: list[str], clients: int) -> list[float]:
    """Milliseconds per request of `clients` processes searching at once (as runs do: each its own process)."""
    per_client = len(queries) // clients
    jobs = [(url, queries[i * per_client : (i + 1) * per_client]) for i in range(clients)]
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        return [t for times in pool.map(_client, jobs) for t in times]


# -- a run's process -------------------------------------------------------------------------------------------

_RUN = """
import json, sys
from pathlib import Path
from inspo_engine.build import make_retriever
from inspo_engine.config import RunConfig
config = RunConfig.from_dict({"env": {"corpus": sys.argv[1], "retriever": "bm25"}})
retriever = make_retriever(config, Path(sys.argv[2]), service=sys.argv[3])
for query in json.loads(sys.argv[4]):
    assert retriever.search([query], 3)
status = dict(l.split(":", 1) for l in Path("/proc/self/status").read_text().splitlines() if ":" in l)
print(int(status["VmHWM"].split()[0]))
"""


def run_peak_kb(corpus: str, cache: Path, service: str, queries: list[str]) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _RUN, corpus, str(cache), service, json.dumps(queries)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return int(out.stdout.split()[-1])


# -- dense -----------------------------------------------------------------------------------------------------


def dense(rows: int, folder: Path, seed: int) -> dict[str, Any]:
    """Synthetic clustered unit vectors, the platform's dense index over them, latency (one thread, as the service
    searches) and recall@10 vs exact."""
    import faiss

    dim = 384
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(256, dim)).astype(np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    vectors_path = folder / "vectors.f16"
    with vectors_path.open("wb") as handle:
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            block = centres[rng.integers(0, 256, n)] + 0.6 * rng.normal(size=(n, dim)).astype(np.float32)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            handle.write(block.astype("<f2").tobytes())
    plan = AnnPlan(rows=rows, dim=dim)
    started = time.monotonic()
    indexes._write_ann(vectors_path, plan, folder / "ann.faiss")
    build_s = time.monotonic() - started
    offsets = folder / "offsets.u64"
    offsets.write_bytes(b"")
    (folder / "meta.json").write_text(
        json.dumps({"schema_version": indexes.SCHEMA_VERSION, "method": "dense", "corpus": str(offsets), "rows": rows,
                    "dim": dim, "factory": plan.factory()}), encoding="utf-8",
    )  # fmt: skip
    index = CorpusIndex(folder, encode=lambda texts: np.zeros((len(texts), dim), dtype=np.float32))
    faiss.omp_set_num_threads(1)
    stored = np.memmap(vectors_path, dtype="<f2", mode="r").reshape(-1, dim)
    picked = rng.integers(0, rows, 200)
    queries = stored[picked].astype(np.float32) + 0.3 * rng.normal(size=(200, dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    best = np.full((200, 10), -1, dtype=np.int64)
    best_scores = np.full((200, 10), -np.inf, dtype=np.float32)
    for start in range(0, rows, 500_000):
        scores = queries @ stored[start : start + 500_000].astype(np.float32).T
        both = np.concatenate([best_scores, scores], axis=1)
        rows_of = np.concatenate([best, np.arange(start, start + scores.shape[1])[None, :].repeat(200, 0)], axis=1)
        order = np.argsort(-both, axis=1)[:, :10]
        best_scores, best = np.take_along_axis(both, order, 1), np.take_along_axis(rows_of, order, 1)
    for query in queries:  # pages in what the searches read
        index.search_vectors(query[None, :], 10)
    sweep = []
    for probes in sorted({plan.probes, *DENSE_PROBES}):
        if not plan.exact:
            faiss.extract_index_ivf(index._ann).nprobe = probes
        times, found = [], []
        for query in queries:
            started = time.perf_counter()
            found.append([row for row, _ in index.search_vectors(query[None, :], 10)[0]])
            times.append((time.perf_counter() - started) * 1000)
        recall = np.mean([len(set(f) & set(b.tolist())) / 10 for f, b in zip(found, best, strict=True)])
        sweep.append({"probes": probes, "p50": percentile(times, 50), "p95": percentile(times, 95),
                      "recall": float(recall), "platform": probes == plan.probes})  # fmt: skip
    return {
        "factory": plan.factory(), "lists": plan.lists, "rerank": plan.rerank, "build_s": build_s,
        "index_mb": (folder / "ann.faiss").stat().st_size / 1e6, "sweep": sweep,
    }  # fmt: skip


# -- one size --------------------------------------------------------------------------------------------------


def measure(passages: int, work: Path, seed: int, with_dense: bool, workers: int) -> dict[str, Any]:
    corpus = work / f"corpus-{passages}-seed{seed}.jsonl"
    if not corpus.is_file():
        print(f"writing {passages:,} passages …", file=sys.stderr, flush=True)
        write_corpus(corpus, passages, seed)
    cache = work / f"cache-{passages}"
    shutil.rmtree(cache, ignore_errors=True)
    root = cache / "indexes"
    indexes.corpus_digest(corpus)  # hashing is the upload's work, not the build's
    print(f"building BM25 over {passages:,} passages …", file=sys.stderr, flush=True)
    started = time.monotonic()
    folder = build_index("bm25", corpus, root)
    build_s = time.monotonic() - started
    size_mb = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6
    queries = queries_of(corpus, 800, seed)
    service, address = start_service(root, workers)
    try:
        url = f"{address}/indexes/{folder.name}/retrieve"
        timed_searches(url, [[q] for q in queries[:20]])  # the first searches page the index in
        single = timed_searches(url, [[q] for q in queries[:300]])
        batched = [t / 32 for t in timed_searches(url, [queries[i : i + 32] for i in range(0, 640, 32)])]
        concurrent = concurrent_searches(url, queries[320:800], 8)
        service_rss_kb = httpx.get(f"{address}/indexes", timeout=30).json()["rss_bytes"] / 1e3
        run_peak_kb("builtin", cache, address, queries[:1])  # builds the built-in corpus's index, once
        builtin_kb = run_peak_kb("builtin", cache, address, queries[:40])
        corpus_kb = run_peak_kb(str(corpus), cache, address, queries[:40])
    finally:
        service.terminate()
        service.wait()
    row: dict[str, Any] = {
        "passages": passages, "corpus_gb": corpus.stat().st_size / 1e9, "build_per_s": passages / build_s,
        "index_mb": size_mb, "p50": percentile(single, 50), "p95": percentile(single, 95),
        "batch_p50": percentile(batched, 50), "batch_p95": percentile(batched, 95),
        "c8_p50": percentile(concurrent, 50), "c8_p95": percentile(concurrent, 95),
        "service_rss_gb": service_rss_kb / 1e6, "workers": workers,
        "run_rss_delta_mb": (corpus_kb - builtin_kb) / 1e3, "run_peak_mb": corpus_kb / 1e3,
    }  # fmt: skip
    if with_dense:
        print(f"dense over {passages:,} synthetic vectors …", file=sys.stderr, flush=True)
        row["dense"] = dense(passages, cache / "dense-synthetic", seed)
        shutil.rmtree(cache / "dense-synthetic", ignore_errors=True)
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, help="one size only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/inspo-retrieval-bench"))
    parser.add_argument("--no-dense", action="store_true")
    parser.add_argument("--workers", type=int, default=default_workers(), help="the service's processes")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = [
        measure(n, args.work, args.seed, not args.no_dense, args.workers)
        for n in ([args.passages] if args.passages else SIZES)
    ]
    print(f"The service with {args.workers} worker process{'es' if args.workers > 1 else ''}.\n")
    print(
        "| passages | corpus GB | BM25 build /s | index MB | p50 / p95 ms, one at a time | per query in batches of "
        "32, p50 / p95 ms | p50 / p95 ms, 8 clients | service RSS GB | run RSS vs built-in MB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['passages']:,} | {r['corpus_gb']:.2f} | {r['build_per_s']:,.0f} | {r['index_mb']:,.0f} | "
            f"{r['p50']:.1f} / {r['p95']:.1f} | {r['batch_p50']:.1f} / {r['batch_p95']:.1f} | "
            f"{r['c8_p50']:.1f} / {r['c8_p95']:.1f} | {r['service_rss_gb']:.2f} | {r['run_rss_delta_mb']:+.0f} |"
        )
    if any("dense" in r for r in rows):
        print("\n| passages (synthetic vectors) | index | build s | index MB | lists probed | p50 / p95 ms | "
              "recall@10 vs flat |")  # fmt: skip
        print("|---:|---|---:|---:|---:|---:|---:|")
        for r in rows:
            if "dense" in r:
                d = r["dense"]
                for point in d["sweep"]:
                    mark = " (the platform's)" if point["platform"] else ""
                    print(
                        f"| {r['passages']:,} | {d['factory']}, ×{d['rerank']} re-ranked | {d['build_s']:.0f} | "
                        f"{d['index_mb']:,.0f} | {point['probes']} of {d['lists']:,}{mark} | "
                        f"{point['p50']:.1f} / {point['p95']:.1f} | {point['recall']:.3f} |"
                    )
    last = rows[-1]
    print(f"N={last['passages']} bm25_build_per_s={last['build_per_s']:.0f} bm25_p95_ms={last['p95']:.1f} "
          f"bm25_p95_8clients_ms={last['c8_p95']:.1f} service_rss_gb={last['service_rss_gb']:.2f} "
          f"run_rss_delta_mb={last['run_rss_delta_mb']:.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
