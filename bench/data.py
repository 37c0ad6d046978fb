"""Bring-your-own-data targets, measured against a real web server; prints a Markdown table for docs/benchmarks.md.

    .venv/bin/python bench/data.py [--upload-mb 200] [--passages 100000] [--questions 1000] [--upload-only]

1. Upload: a FlashRAG questions JSONL of about `--upload-mb` MB, streamed from disk by curl to a gunicorn worker
   (one process, one thread) with PostgreSQL behind it; the rate is the file's size over the request's wall time
   (upload, check and storage together), and the web process's RSS growth is its peak (VmHWM) during the request
   minus its resident size before it.
2. A BM25 index of `--passages` synthetic passages (about 60 words each) built on disk as an index job builds it
   (`build_index`), with progress reports, on this machine's cores.
3. A `--questions`-question upload whose last record is bad: the time until the 400 names it.

`--upload-only` measures the questions upload, its RSS growth and the bad file's 400 only (no corpus, no index).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PYTHON = str(ROOT / ".venv" / "bin" / "python")
WORDS = [
    "river",
    "capital",
    "mountain",
    "city",
    "country",
    "people",
    "war",
    "king",
    "river",
    "empire",
    "music",
    "film",
    "novel",
    "island",
    "sea",
]


def questions_file(path: Path, megabytes: int, *, bad_last: bool = False, count: int | None = None) -> int:
    """Write a questions JSONL of about `megabytes` MB (or `count` records); returns its size in bytes."""
    rng = random.Random(0)
    with path.open("w") as handle:
        index, size = 0, 0
        while (count is None and size < megabytes * 1_000_000) or (count is not None and index < count):
            question = " ".join(rng.choice(WORDS) for _ in range(12))
            record = {"id": f"q{index}", "question": f"What is the {question}?", "golden_answers": [rng.choice(WORDS)]}
            if bad_last and count is not None and index == count - 1:
                record["golden_answers"] = []
            line = json.dumps(record) + "\n"
            handle.write(line)
            size += len(line)
            index += 1
    return path.stat().st_size


def _memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in kB."""
    text = Path(f"/proc/{pid}/status").read_text()
    values = {k: int(v.split()[0]) for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(.*)$", text, re.M)}
    return values["VmRSS"], values["VmHWM"]


def _server(env: dict[str, str], port: int) -> tuple[subprocess.Popen[bytes], int]:
    process = subprocess.Popen(
        [str(ROOT / ".venv/bin/gunicorn"), "webapp.config.wsgi", "-b", f"127.0.0.1:{port}", "-w", "1", "--timeout",
         "600"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    for _ in range(100):
        time.sleep(0.2)
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        if children and subprocess.run(
            ["curl", "-sf", f"http://127.0.0.1:{port}/api/v1/"], capture_output=True
        ).returncode in (0, 22):
            return process, int(children[0])
    raise SystemExit("the web server did not start")


def corpus_file(path: Path, megabytes: int) -> int:
    """A FlashRAG corpus of about `megabytes` MB, passages of about 100 words (wiki-18's are 100)."""
    rng = random.Random(2)
    with path.open("w") as handle:
        index, size = 0, 0
        while size < megabytes * 1_000_000:
            text = " ".join(rng.choice(WORDS) for _ in range(100))
            line = json.dumps({"id": str(index), "contents": f'"Title {index}"\n{text}'}) + "\n"
            handle.write(line)
            size += len(line)
            index += 1
    return path.stat().st_size


def _upload(port: int, token: str, path: Path, name: str, kind: str = "questions") -> tuple[int, float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        ["curl", "-s", "-o", "/dev/stderr", "-w", "%{http_code}", "-H", f"Authorization: Token {token}",
         "-F", f"file=@{path}", "-F", f"name={name}", "-F", f"kind={kind}", f"http://127.0.0.1:{port}/api/v1/datasets/"],
        capture_output=True, text=True,
    )  # fmt: skip
    return int(done.stdout or 0), time.perf_counter() - started, done.stderr[:300]


def measure_uploads(megabytes: int, questions: int, *, corpus: bool = True) -> list[tuple[str, str, str]]:
    work = Path(tempfile.mkdtemp(prefix="inspo-bench-data-"))
    env = {
        **os.environ,
        "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/inspo_bench_data"),
        "INSPO_DATA_DIR": str(work / "data"),
        "INSPO_CACHE_DIR": str(work / "cache"),
        "INSPO_DATA_MAX_UPLOAD_BYTES": str(2 << 30),
        "DJANGO_DEBUG": "0",
        "INSPO_API_RATE_USER": "100000/min",
    }
    database = env["DATABASE_URL"].rsplit("/", 1)[1]  # a fresh one: an upload already there would be a duplicate
    for command in ("dropdb", "createdb"):
        subprocess.run([command, "-h", "127.0.0.1", "-U", "postgres", database], capture_output=True)
    subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    made = subprocess.run(
        [PYTHON, "manage.py", "create_team_user", "--team", "Bench", "--username", f"bench{os.getpid()}", "--token"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    token = re.findall(r"^token: (\S+)$", made.stdout, re.M)[-1]
    big = work / "big.jsonl"
    size = questions_file(big, megabytes)
    wiki = work / "wiki.jsonl"
    wiki_size = corpus_file(wiki, megabytes) if corpus else 0
    bad = work / "bad.jsonl"
    questions_file(bad, 0, bad_last=True, count=questions)
    port = 18000 + os.getpid() % 1000
    process, worker = _server(env, port)
    try:
        rss_before, _ = _memory(worker)
        status, seconds, body = _upload(port, token, big, "big")
        _, peak = _memory(worker)
        wiki_status, wiki_seconds, _ = _upload(port, token, wiki, "wiki", "corpus") if corpus else (0, 1.0, "")
        bad_status, bad_seconds, bad_body = _upload(port, token, bad, "bad")
    finally:
        process.terminate()
        process.wait(30)
    rows = [
        (
            f"upload of {size / 1e6:.0f} MB JSONL ({status})",
            f"{size / 1e6 / seconds:.1f} MB/s ({seconds:.1f} s)",
            "≥ 50 MB/s",
        ),
        ("web process RSS growth during it", f"{(peak - rss_before) / 1024:.0f} MB", "≤ 100 MB"),
        *(
            [
                (
                    f"upload of a {wiki_size / 1e6:.0f} MB corpus JSONL, 100-word passages ({wiki_status})",
                    f"{wiki_size / 1e6 / wiki_seconds:.1f} MB/s ({wiki_seconds:.1f} s)",
                    "≥ 20 MB/s",
                )
            ]
            if corpus
            else []
        ),
        (f"{questions}-question file, last record bad ({bad_status})", f"{bad_seconds * 1000:.0f} ms", "< 1 s"),
    ]
    print(f"upload answer: {body[:200]}\nbad upload answer: {bad_body[:200]}", file=sys.stderr)
    return rows


def measure_index(passages: int) -> tuple[str, str, str]:
    from inspo_engine.env.indexes import build_index

    rng = random.Random(1)
    reports: list[int] = []
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "corpus.jsonl"
        with corpus.open("w") as handle:
            for i in range(passages):
                text = " ".join(rng.choice(WORDS) + str(rng.randrange(5000)) for _ in range(60))
                handle.write(json.dumps({"id": f"p{i}", "contents": f'"Title {i}"\n{text}'}) + "\n")
        started = time.perf_counter()
        build_index("bm25", corpus, Path(folder) / "indexes", progress=lambda done, total: reports.append(done))
        seconds = time.perf_counter() - started
    return (f"BM25 index of {passages:,} passages ({len(reports)} progress reports)", f"{seconds:.1f} s", "≤ 60 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upload-mb", type=int, default=200)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--upload-only", action="store_true", help="the questions upload and the bad file only")
    args = parser.parse_args()
    rows = measure_uploads(args.upload_mb, args.questions, corpus=not args.upload_only)
    if not args.upload_only:
        rows.append(measure_index(args.passages))
    print(f"| what ({os.cpu_count()} cores) | measured | target |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
