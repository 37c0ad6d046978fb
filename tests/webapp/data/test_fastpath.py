"""The block-at-a-time check: every block it vouches for is written byte for byte as the record-at-a-time check
writes it, any other block goes back to that check, and an upload big enough to use it (and its helper process)
refuses the same files with the same messages, naming the line and field."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from array import array
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.webapp.data.conftest import corpus, jsonl, questions, upload
from webapp.data import fastpath, formats
from webapp.data.formats import ANSWER_BINS, PASSAGE_BINS, UploadRefused, _canonical
from webapp.data.models import DatasetVersion

TRICKY_VALUES = [
    "x", " x ", "", " ", "\u3000", "\u00a0a", "a\u0000", "é", "😀", "\u2028", "\x7f", '"', "\\", "a" * 201, "a" * 200,
    1, -3, 2**63, 2**64, 2**64 + 1, 1.5, True, None, [], ["a"], ["a", " "], [""], ["\u0000"], [1], {"a": 1}, "\n",
]  # fmt: skip


def slow(lines: list[bytes], kind: str) -> tuple[bytes, bytes, list[int]] | None:
    """What the record-at-a-time check writes for these lines, or None when it refuses one."""
    bins = ANSWER_BINS if kind == "questions" else PASSAGE_BINS
    out, digests, counts = [], array("q"), [0] * (len(bins) + 1)
    for line in lines:
        try:
            record = _canonical(orjson.loads(line), kind, "f", "line 1")  # type: ignore[arg-type]
        except (orjson.JSONDecodeError, UploadRefused):
            return None
        out.append(orjson.dumps(record) + b"\n")
        digests.append(hash(record["id"]))
        text = record["golden_answers"][0] if kind == "questions" else record["contents"]
        counts[formats.bisect.bisect_left(bins, len(text.split()))] += 1
    return b"".join(out), digests.tobytes(), counts


def fast(lines: list[bytes], kind: str) -> tuple[bytes, bytes, list[int]] | None:
    bins = ANSWER_BINS if kind == "questions" else PASSAGE_BINS
    batch = fastpath.FastLines(kind, 1 << 20, bins).batch(b"".join(line + b"\n" for line in lines), len(lines))  # type: ignore[arg-type]
    return None if batch is None else (batch.data, batch.digests, batch.counts)


def test_a_block_it_vouches_for_is_written_as_the_record_at_a_time_check_writes_it():
    rng = random.Random(0)
    vouched = 0
    for _ in range(3000):
        kind = rng.choice(["questions", "corpus"])
        fields = ["id", "question", "golden_answers"] if kind == "questions" else ["id", "contents"]
        records = []
        for _ in range(rng.randint(1, 3)):
            record = {name: rng.choice(TRICKY_VALUES) for name in fields}
            if rng.random() < 0.1:
                record.pop(rng.choice(fields))
            if rng.random() < 0.05:
                record["extra"] = "x"
            records.append(record)
        lines = [json.dumps(r, ensure_ascii=rng.random() < 0.5).encode() for r in records]
        found = fast(lines, kind)
        if found is not None:
            vouched += 1
            assert found == slow(lines, kind), lines
    assert vouched > 20  # the plain records were vouched for, not all sent back


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=8), min_size=3, max_size=3), st.booleans())
def test_any_text_either_goes_back_or_is_written_the_same(texts, ascii_only):
    identifier, question, answer = texts
    line = json.dumps({"id": identifier, "question": question, "golden_answers": [answer]}, ensure_ascii=ascii_only)
    found = fast([line.encode()], "questions")
    if found is not None:
        assert found == slow([line.encode()], "questions")


@pytest.mark.parametrize(
    "line",
    [
        b"",  # a blank line: the numbers after it would shift
        b'{"id": "a", "question": "q", "golden_answers": ["x"], "metadata": {"n": 1}}',  # another key
        b'{"id": "a", "question": "q\\u0000", "golden_answers": ["x"]}',
        b'{"id": "a", "question": "q", "golden_answers": ["x"], "m": "\xff"}',
        b'{"id": "a", "question": "q", "golden_answers": "x"}',  # one answer as a string, which the check takes
    ],
)
def test_a_block_with_anything_else_goes_back_to_the_record_at_a_time_check(line):
    good = b'{"id": "b", "question": "q", "golden_answers": ["x"]}'
    assert fast([good, line], "questions") is None


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 4 kB and the helper process for any size, so a small file goes through both."""
    monkeypatch.setattr(formats, "LINE_BLOCK", 4096)
    monkeypatch.setattr(formats, "HELPER_FROM_BYTES", 0)


BAD_LATE = [
    ({"id": "q500", "question": "q", "golden_answers": []}, "line 501: field 'golden_answers' must be a non-empty"),
    ({"id": "q500", "question": " ", "golden_answers": ["a"]}, "line 501: field 'question' must be a non-empty"),
    ({"id": "q500", "question": "q", "golden_answers": [" "]}, "line 501: field 'golden_answers' must hold"),
    ({"id": "q500", "question": "q", "golden_answers": [3]}, "line 501: field 'golden_answers' must hold"),
    ({"id": "q500", "question": "q\u0000", "golden_answers": ["a"]}, "line 501: field 'question' holds a NUL"),
    ({"id": "q1", "question": "q", "golden_answers": ["a"]}, "line 501: field 'id' repeats 'q1' of line 2"),
    ({"id": " ", "question": "q", "golden_answers": ["a"]}, "line 501: field 'id' must be a non-empty string"),
    ({"id": "x" * 201, "question": "q", "golden_answers": ["a"]}, "line 501: field 'id' must be at most 200"),
    ({"question": "q", "golden_answers": ["a"]}, "line 501: field 'id' is missing"),
    ({"id": 2**64, "question": "q", "golden_answers": ["a"]}, "line 501: field 'id' must be a non-empty string"),
]


@pytest.mark.parametrize(("record", "message"), BAD_LATE)
def test_a_bad_record_in_a_later_block_is_named_as_before(alice, api, small_blocks, record, message):
    records = questions(500)
    content = jsonl([*records, record, *questions(300, start=1000)])
    response = upload(api(alice), content)
    assert response.status_code == 400, response.json()
    assert message in response.json()["file"][0]
    assert not DatasetVersion.objects.exists()


def test_bad_json_and_bad_utf8_in_a_later_block_are_named_as_before(alice, api, small_blocks):
    good = jsonl(questions(500))
    refused = upload(api(alice), good + b'{"id": "z", "question": "\xff", "golden_answers": ["a"]}\n' + good)
    assert "line 501: not valid UTF-8" in refused.json()["file"][0]
    refused = upload(api(alice), good + b'{"id": "z", "question": \n' + good)
    assert "line 501: invalid JSON" in refused.json()["file"][0]


@pytest.mark.parametrize("kind", ["questions", "corpus"])
def test_a_big_file_is_stored_as_the_record_at_a_time_check_stores_it(
    alice, api, data_storage, small_blocks, monkeypatch, kind
):
    records = questions(2000) if kind == "questions" else corpus(2000)
    records[700] = {**records[700], "id": 700}  # an integer id, written as a string
    if kind == "questions":
        records[900]["question"] = "  padded  "
        records[1500]["meta"] = {"source": "elsewhere"}  # another key: that block goes back
    content = jsonl(records[:1000]) + b"\n" + jsonl(records[1000:])  # a blank line
    name = "big" if kind == "questions" else "wiki"
    vouched, batch = [], fastpath.FastLines.batch
    monkeypatch.setattr(fastpath.FastLines, "batch", lambda self, *a: vouched.append(batch(self, *a)) or vouched[-1])
    fast_version = upload(api(alice), content, name=name, kind=kind).json()
    assert sum(found is not None for found in vouched) > 5  # this process's half of the blocks, most vouched for
    monkeypatch.setattr(fastpath.FastLines, "batch", lambda self, block, lines: None)
    slow_version = upload(api(alice), content, name=f"{name}2", kind=kind).json()
    assert fast_version["sha256"] == slow_version["sha256"] and fast_version["records"] == 2000
    assert fast_version["lengths"] == slow_version["lengths"]


def test_a_dead_helper_leaves_this_process_to_check_every_block(alice, api, small_blocks, monkeypatch):
    monkeypatch.setattr(fastpath, "_helper_pool", lambda: None)
    response = upload(api(alice), jsonl(questions(2000)))
    assert response.status_code == 201 and response.json()["records"] == 2000


def test_the_helper_exits_once_the_process_that_started_it_is_killed():
    code = (
        "import os; from webapp.data import fastpath; "
        "print(fastpath._helper_pool().submit(os.getpid).result(), flush=True); os.kill(os.getpid(), 9)"
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=60)
    helper = Path(f"/proc/{int(done.stdout.split()[0])}/stat")
    for _ in range(150):  # it looks for its parent once a second
        if not helper.exists() or helper.read_text().split(")")[-1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the helper outlived the process that started it")


def blocks_of(prefix: str, count: int = 12) -> list[bytes]:
    return [jsonl(questions(40, prefix=f"{prefix}{i}-")) for i in range(count)]


def checked_in_order(blocks: list[bytes]) -> list[bytes | None]:
    checker = fastpath.Blocks(fastpath.FastLines("questions", 1 << 20, ANSWER_BINS), helper=True)
    found = []
    for block in blocks:
        checker.add(block, 40)
        while checker.ready():
            found.append(checker.next()[2])
    while checker.pending:
        found.append(checker.next()[2])
    return [None if batch is None else batch.data for batch in found]


def test_two_request_threads_share_the_helper_and_each_gets_its_own_blocks_back():
    from concurrent.futures import ThreadPoolExecutor

    local = fastpath.FastLines("questions", 1 << 20, ANSWER_BINS)
    with ThreadPoolExecutor(2) as threads:
        results = list(threads.map(checked_in_order, [blocks_of("a"), blocks_of("b")]))
    for prefix, found in zip("ab", results, strict=True):
        assert found == [local.batch(block, 40).data for block in blocks_of(prefix)]  # type: ignore[union-attr]


def test_a_helper_killed_during_a_check_leaves_this_process_to_check_the_rest():
    import os
    import signal

    helper = fastpath._helper_pool()
    assert helper is not None
    os.kill(helper.submit(os.getpid).result(), signal.SIGKILL)
    local = fastpath.FastLines("questions", 1 << 20, ANSWER_BINS)
    assert checked_in_order(blocks_of("c")) == [local.batch(b, 40).data for b in blocks_of("c")]  # type: ignore[union-attr]
    assert checked_in_order(blocks_of("d")) == [local.batch(b, 40).data for b in blocks_of("d")]  # type: ignore[union-attr]
