"""The Milvus index writer and retriever against milvus-lite's server, the Milvus core (v2.5) as a binary in a
Python package, reached over gRPC on a TCP port as a Milvus server is: BM25 and dense search, resuming and
cancelling a write, and the errors an operator sees.

The fixture starts milvus-lite's binary itself rather than through `MilvusClient("….db")`: that path imports the
`milvus_lite` package, whose `__init__` needs `pkg_resources`, which setuptools 81 removed (we pin 84)."""

import hashlib
import importlib.util
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from pymilvus import MilvusClient

from inspo_engine.env.milvus import (
    MilvusIndexWriter,
    MilvusRetriever,
    MilvusSettings,
    collection_name,
)
from inspo_engine.env.protocol import Passage
from inspo_engine.env.retrievers import RetrieverError, ScoredRetriever

pytestmark = pytest.mark.slow  # a server in a subprocess; the whole file takes about 8 s

TOKEN = "root:s3cret-token-never-shown"
CORPUS = [
    Passage(f"p{i:02d}", title, text)
    for i, (title, text) in enumerate(
        [
            ("Lima", "Lima is the capital and largest city of Peru, on the Pacific coast."),
            ("Peru", "The currency of Peru is the sol; Spanish and Quechua are spoken there."),
            ("Japan", "The currency of Japan is the yen, issued by the Bank of Japan."),
            ("Chile", "The international calling code of Chile is plus fifty-six."),
            ("Mount Everest", "Everest is Earth's highest mountain above sea level, in the Himalayas."),
            ("Nile", "The Nile flows north through Egypt and Sudan into the Mediterranean Sea."),
            ("Amazon rainforest", "The Amazon rainforest covers much of Brazil and holds vast biodiversity."),
            ("Photosynthesis", "Plants turn sunlight, water and carbon dioxide into glucose and oxygen."),
            ("Mitochondria", "Mitochondria produce most of a cell's energy as ATP."),
            ("Penicillin", "Alexander Fleming discovered penicillin, the first antibiotic, in 1928."),
            ("Marie Curie", "Marie Curie won Nobel prizes in physics and in chemistry for radioactivity."),
            ("Isaac Newton", "Newton formulated the laws of motion and universal gravitation."),
            ("Albert Einstein", "Einstein developed the theory of relativity and explained the photoelectric effect."),
            ("Ada Lovelace", "Ada Lovelace wrote the first algorithm meant for Babbage's Analytical Engine."),
            ("Alan Turing", "Turing described a universal machine and broke Enigma ciphers at Bletchley Park."),
            ("Python", "Python is a programming language created by Guido van Rossum."),
            ("Linux", "Linus Torvalds released the Linux kernel in 1991."),
            ("Milvus", "Milvus is an open-source vector database for similarity search."),
            ("Great Wall", "The Great Wall of China was built over centuries against northern invaders."),
            ("Eiffel Tower", "The Eiffel Tower in Paris was finished in 1889 for the World's Fair."),
            ("Colosseum", "The Colosseum in Rome hosted gladiator contests for Roman crowds."),
            ("Machu Picchu", "Machu Picchu is an Inca citadel high in the Andes of Peru."),
            ("Sahara", "The Sahara is the largest hot desert, spanning North Africa."),
            ("Antarctica", "Antarctica is the coldest continent, covered by an ice sheet."),
            ("Pacific Ocean", "The Pacific is the largest and deepest of Earth's oceans."),
            ("Jupiter", "Jupiter is the largest planet of the Solar System, a gas giant with a great red spot."),
            ("Mars", "Mars, the red planet, has Olympus Mons, the tallest volcano known."),
            ("Moon landing", "Apollo 11 landed Neil Armstrong and Buzz Aldrin on the Moon in 1969."),
            ("Black holes", "A black hole's gravity is so strong that not even light escapes."),
            ("DNA", "Watson and Crick described the double helix structure of DNA in 1953."),
            ("Violin", "The violin is a bowed string instrument with four strings."),
            ("Mozart", "Wolfgang Amadeus Mozart composed The Magic Flute and over forty symphonies."),
            ("Beethoven", "Beethoven wrote nine symphonies while gradually losing his hearing."),
            ("Shakespeare", "Shakespeare wrote Hamlet, Macbeth and Romeo and Juliet."),
            ("Cervantes", "Miguel de Cervantes wrote Don Quixote, a novel about a deluded knight."),
            ("Tea", "Tea is brewed from the leaves of Camellia sinensis and first drunk in China."),
            ("Coffee", "Coffee beans are roasted seeds of the Coffea plant, first traded from Yemen."),
            ("Chocolate", "Chocolate is made from cacao beans, fermented, roasted and ground."),
            ("Olympic Games", "The modern Olympic Games began in Athens in 1896."),
            ("Football", "Association football is played by two teams of eleven with a round ball."),
            ("Chess", "Chess is a board game in which each player commands sixteen pieces to checkmate a king."),
            ("Honeybee", "Honeybees make honey from nectar and communicate with a waggle dance."),
            ("Blue whale", "The blue whale is the largest animal ever known to have lived."),
            ("Penguin", "Penguins are flightless seabirds living mostly in the Southern Hemisphere."),
            ("Cheetah", "The cheetah is the fastest land animal, sprinting over one hundred km per hour."),
            ("Volcano", "A volcano erupts when magma from the mantle reaches the surface as lava."),
            ("Earthquake", "Earthquakes happen when tectonic plates slip along a fault."),
            ("Rainbow", "A rainbow appears when sunlight is refracted and dispersed by raindrops."),
            ("Printing press", "Johannes Gutenberg built a movable-type printing press around 1440."),
            ("Telephone", "Alexander Graham Bell patented the telephone in 1876."),
        ]
    )
]
CORPUS_SHA = hashlib.sha256("\x1e".join(f"{p.id}\x1f{p.title}\x1f{p.text}" for p in CORPUS).encode()).hexdigest()


def numbered() -> Iterator[tuple[int, Passage]]:
    return iter(enumerate(CORPUS))


def fake_encode(texts: list[str]) -> npt.NDArray[np.float32]:
    """A deterministic bag of hashed words, unit length: similar word sets give close vectors."""
    vectors = np.zeros((len(texts), 64), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            vectors[i, int(hashlib.sha256(word.strip(".,;'").encode()).hexdigest(), 16) % 64] += 1.0
        vectors[i, 0] += 1e-3  # no zero vector, even for an empty text
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def passage_vectors() -> npt.NDArray[np.float32]:
    return fake_encode([f"{p.title}\n{p.text}" for p in CORPUS])


class Cancelled(Exception):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_milvus_lite(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """milvus-lite's server on a free loopback port, its data in `folder`; returns the process and its URI."""
    spec = importlib.util.find_spec("milvus_lite")  # finds the package without running its __init__
    assert spec is not None and spec.submodule_search_locations, "milvus-lite is missing: see requirements/dev.txt"
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    port = free_port()
    env = {**os.environ, "LD_LIBRARY_PATH": f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    log = (folder / "milvus.log").open("wb")
    process = subprocess.Popen(
        [str(lib / "milvus"), str(folder / "inspo.db"), f"127.0.0.1:{port}", "ERROR"],
        cwd=folder,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"http://127.0.0.1:{port}"
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"milvus-lite did not start: {(folder / 'milvus.log').read_text(errors='replace')[-2000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusSettings]:
    """One milvus-lite server for the module (it takes a second or two to start). Its token, which milvus-lite
    ignores, must never surface in an error."""
    process, uri = start_milvus_lite(tmp_path_factory.mktemp("milvus"))
    yield MilvusSettings(uri=uri, token=TOKEN, prefix="test", timeout_s=20)
    stop(process)


def collection(settings: MilvusSettings, tag: str, method: str = "bm25") -> str:
    """A collection of its own for each test that writes: the corpus digest with the test's tag mixed in."""
    digest = hashlib.sha256(f"{CORPUS_SHA}:{tag}".encode()).hexdigest()
    return collection_name(settings.prefix, digest, method)  # type: ignore[arg-type]


def rows_in(settings: MilvusSettings, name: str) -> list[int]:
    client = MilvusClient(uri=settings.uri, token=settings.token)
    try:
        return sorted(r["row"] for r in client.query(name, filter="row >= 0", output_fields=["row"], limit=1000))
    finally:
        client.close()


@pytest.fixture(scope="module")
def bm25(settings: MilvusSettings) -> Iterator[MilvusRetriever]:
    name = collection_name(settings.prefix, CORPUS_SHA, "bm25")
    with MilvusIndexWriter(settings, batch_size=16) as writer:
        writer.write(name, numbered(), total=len(CORPUS), method="bm25")
    retriever = MilvusRetriever(settings, name, method="bm25")
    yield retriever
    retriever.close()


@pytest.fixture(scope="module")
def dense(settings: MilvusSettings) -> Iterator[MilvusRetriever]:
    name = collection_name(settings.prefix, CORPUS_SHA, "dense", model="fake-hashed-words")
    with MilvusIndexWriter(settings, batch_size=16) as writer:
        writer.write(name, numbered(), total=len(CORPUS), method="dense", embeddings=passage_vectors())
    retriever = MilvusRetriever(settings, name, method="dense", encode=fake_encode)
    yield retriever
    retriever.close()


# -- search ----------------------------------------------------------------------------------------------------

QUESTIONS = {
    "capital of Peru": "Lima",
    "what currency does Japan use": "Japan",
    "who discovered penicillin": "Penicillin",
    "tallest volcano on the red planet": "Mars",
    "fastest land animal": "Cheetah",
    "who wrote Don Quixote": "Cervantes",
    "Inca citadel in the Andes": "Machu Picchu",
    "double helix structure": "DNA",
}


def test_bm25_ranks_the_passage_that_matches_first_for_a_batch_of_queries(bm25: MilvusRetriever) -> None:
    assert isinstance(bm25, ScoredRetriever)
    results = bm25.search(list(QUESTIONS), 3)
    assert [hits[0].title for hits in results] == list(QUESTIONS.values())
    assert all(len(hits) <= 3 for hits in results)


def test_bm25_gives_back_the_passage_as_written_with_scores_best_first(bm25: MilvusRetriever) -> None:
    (hits,) = bm25.search_with_scores(["capital city of Peru"], 5)
    assert hits[0][0] == CORPUS[0]
    scores = [score for _, score in hits]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    assert bm25.count() == len(CORPUS)


def test_bm25_ignores_stopwords_and_case_and_answers_nothing_for_a_query_without_words(bm25: MilvusRetriever) -> None:
    assert [hits[0].title for hits in bm25.search(["THE CAPITAL OF PERU"], 1)] == ["Lima"]
    assert bm25.search(["the of and", ""], 3) == [[], []]
    assert bm25.search([], 3) == [] and bm25.search(["Peru"], 0) == [[]]


def test_dense_returns_the_exact_nearest_row(dense: MilvusRetriever) -> None:
    queries = ["largest animal ever", "Nobel prizes for radioactivity", "Python programming language", "moon 1969"]
    expected = np.argsort(-(fake_encode(queries) @ passage_vectors().T), axis=1)[:, 0]
    results = dense.search_with_scores(queries, 4)
    assert [hits[0][0] for hits in results] == [CORPUS[i] for i in expected]
    best = [hits[0][1] for hits in results]
    assert best == pytest.approx(
        [float(fake_encode([q])[0] @ passage_vectors()[i]) for q, i in zip(queries, expected, strict=True)], abs=1e-4
    )


def test_dense_finds_a_passage_from_its_own_text(dense: MilvusRetriever) -> None:
    texts = [f"{p.title}\n{p.text}" for p in CORPUS[::7]]
    assert [hits[0] for hits in dense.search(texts, 1)] == CORPUS[::7]


# -- writing ---------------------------------------------------------------------------------------------------


def test_a_progress_callback_that_raises_cancels_the_write(settings: MilvusSettings) -> None:
    name = collection(settings, "cancel")
    reports: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        reports.append((done, total))
        if done >= 10:
            raise Cancelled

    with MilvusIndexWriter(settings, batch_size=10) as writer, pytest.raises(Cancelled):
        writer.write(name, numbered(), total=len(CORPUS), method="bm25", progress=progress)
    assert reports == [(0, 50), (10, 50)]
    assert rows_in(settings, name) == list(range(10))


def test_an_interrupted_write_resumes_from_the_last_whole_batch_without_duplicates(settings: MilvusSettings) -> None:
    name = collection(settings, "resume")

    def stop_at_20(done: int, total: int) -> None:
        if done >= 20:
            raise Cancelled

    with MilvusIndexWriter(settings, batch_size=10) as writer:
        with pytest.raises(Cancelled):
            writer.write(name, numbered(), total=len(CORPUS), method="bm25", progress=stop_at_20)
        # A process killed inside an insert can leave part of the next batch behind.
        client = MilvusClient(uri=settings.uri, token=settings.token)
        client.insert(name, [{"row": r, "pid": "x", "title": "", "contents": "partial"} for r in range(20, 25)])
        client.close()

        seen: list[int] = []
        report = writer.write(
            name, numbered(), total=len(CORPUS), method="bm25", progress=lambda done, _: seen.append(done)
        )
    assert (report.resumed_from, report.rows, seen) == (20, 50, [20, 30, 40, 50])
    assert rows_in(settings, name) == list(range(50))
    retriever = MilvusRetriever(settings, name, method="bm25")
    assert retriever.search(["partial"], 3) == [[]]
    assert retriever.search(["fastest land animal"], 1) == [[CORPUS[44]]]
    retriever.close()


def test_writing_a_complete_index_again_changes_nothing_and_reads_no_passage(settings: MilvusSettings) -> None:
    name = collection(settings, "again")

    def unread() -> Iterator[tuple[int, Passage]]:
        raise AssertionError("a complete index read its passages again")
        yield

    with MilvusIndexWriter(settings, batch_size=16) as writer:
        writer.write(name, numbered(), total=len(CORPUS), method="bm25")
        report = writer.write(name, unread(), total=len(CORPUS), method="bm25")
    assert (report.resumed_from, report.rows) == (50, 50)
    assert rows_in(settings, name) == list(range(50))


def test_the_writer_refuses_rows_out_of_order_and_a_dense_index_without_embeddings(settings: MilvusSettings) -> None:
    with MilvusIndexWriter(settings) as writer:
        with pytest.raises(ValueError, match="in order"):
            writer.write(collection(settings, "order"), iter([(1, CORPUS[1])]), total=2, method="bm25")
        with pytest.raises(ValueError, match="embeddings"):
            writer.write(collection(settings, "dense", "dense"), numbered(), total=len(CORPUS), method="dense")
        with pytest.raises(ValueError, match="collection name"):
            writer.write("Robert'); drop", numbered(), total=len(CORPUS), method="bm25")


# -- errors ----------------------------------------------------------------------------------------------------


def test_a_missing_collection_is_a_clear_error_that_names_it(settings: MilvusSettings) -> None:
    name = collection(settings, "never-built")
    with pytest.raises(RetrieverError, match=f"no collection {name}: build its index first") as error:
        MilvusRetriever(settings, name, method="bm25")
    assert TOKEN not in str(error.value)


def test_a_collection_of_another_method_is_refused(settings: MilvusSettings, bm25: MilvusRetriever) -> None:
    with pytest.raises(RetrieverError, match="is not a dense index"):
        MilvusRetriever(settings, bm25.collection, method="dense", encode=fake_encode)


def test_an_unreachable_server_is_a_clear_error_without_the_token() -> None:
    port = free_port()
    settings = MilvusSettings(uri=f"http://admin:pw@127.0.0.1:{port}", token=TOKEN, timeout_s=3)
    assert TOKEN not in repr(settings)
    for connect in (
        lambda: MilvusRetriever(settings, "inspo_bm25_x", method="bm25"),
        lambda: MilvusIndexWriter(settings),
    ):
        with pytest.raises(RetrieverError, match=rf"Milvus at http://127\.0\.0\.1:{port}: connecting failed") as error:
            connect()
        assert TOKEN not in str(error.value) and "pw" not in str(error.value)


def test_collection_names_take_only_a_checked_prefix_and_digests() -> None:
    with pytest.raises(ValueError, match="prefix"):
        collection_name("Team's", CORPUS_SHA, "bm25")
    with pytest.raises(ValueError, match="hex"):
        collection_name("inspo", "../../etc", "bm25")
    with pytest.raises(ValueError, match="method"):
        collection_name("inspo", CORPUS_SHA, "splade")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefix"):
        MilvusSettings(uri="x.db", prefix="a-b")


def test_a_server_that_dies_mid_run_fails_the_search_clearly_and_soon(tmp_path: Path) -> None:
    process, uri = start_milvus_lite(tmp_path)
    try:
        settings = MilvusSettings(uri=uri, token=TOKEN, prefix="test", timeout_s=5)
        name = collection_name(settings.prefix, CORPUS_SHA, "bm25")
        with MilvusIndexWriter(settings, batch_size=50) as writer:
            writer.write(name, numbered(), total=len(CORPUS), method="bm25")
        retriever = MilvusRetriever(settings, name, method="bm25")
        assert retriever.search(["capital of Peru"], 1) == [[CORPUS[0]]]
    finally:
        process.kill()
        process.wait()
    started = time.monotonic()
    with pytest.raises(RetrieverError, match=f"Milvus at {uri}: searching {name} failed") as error:
        retriever.search(["capital of Peru"], 1)
    assert time.monotonic() - started < 15 and TOKEN not in str(error.value)
    retriever.close()
