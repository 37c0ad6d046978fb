"""LocalModelClient on a tiny randomly initialised Llama and a word-level tokenizer built offline in a temp dir."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from inspo_engine.config import OptimizerConfig  # noqa: E402
from inspo_engine.optimizers import LocalModelClient, OptimizerError, build_optimizer  # noqa: E402

SPECIALS = ["<eos>", "<unk>", "<pad>", "<system>", "<user>", "<assistant>"]
WORD_TEXT = """
the a an instruction question answer search think step by first then finally query passage evidence retrieve verify
write short clear better improve agent should must use tools when needed before after rewrite propose new old rule
reason about facts check
"""
WORDS = WORD_TEXT.split()
CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def save_tokenizer(directory: Path, *, chat_template: str | None) -> None:
    vocab = {token: index for index, token in enumerate(SPECIALS + WORDS)}  # "<eos>" is id 0 on purpose
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>", pad_token="<pad>"
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(directory)


def save_model(directory: Path, *, seed: int, silent: bool = False) -> None:
    """A 2-layer Llama with hidden size 32. ``silent``: zero output head, so greedy decoding picks id 0, <eos>."""
    config = transformers.LlamaConfig(
        vocab_size=len(SPECIALS) + len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        bos_token_id=None,
        eos_token_id=0,
        pad_token_id=2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(config)
    if silent:
        with torch.no_grad():
            model.lm_head.weight.zero_()
    else:
        model.generation_config.eos_token_id = None  # never stop early: every call yields max_new_tokens tokens
    model.save_pretrained(directory)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("models") / "tiny-chat-lm"
    save_tokenizer(directory, chat_template=CHAT_TEMPLATE)
    save_model(directory, seed=1)
    return directory


@pytest.fixture(scope="module")
def plain_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("models") / "tiny-plain-lm"
    save_tokenizer(directory, chat_template=None)
    save_model(directory, seed=2)
    return directory


@pytest.fixture(scope="module")
def silent_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("models") / "tiny-silent-lm"
    save_tokenizer(directory, chat_template=CHAT_TEMPLATE)
    save_model(directory, seed=3, silent=True)
    return directory


def test_it_is_labelled_as_a_weak_local_model(model_dir: Path) -> None:
    client = LocalModelClient(model_path=str(model_dir) + "/", max_new_tokens=4)

    assert client.model == "local:tiny-chat-lm (weak)"
    assert "weak fallback" in (LocalModelClient.__doc__ or "").lower()


def test_it_answers_through_the_chat_template_with_exact_token_counts(model_dir: Path) -> None:
    client = LocalModelClient(model_path=str(model_dir), max_new_tokens=8)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)

    completion = client.complete("rewrite the instruction", system="you improve agent instruction")

    # "<system> you improve agent instruction <user> rewrite the instruction <assistant>" is 10 words.
    assert completion.input_tokens == 10
    assert completion.output_tokens == 8
    assert completion.model == "local:tiny-chat-lm (weak)"
    assert completion.text.strip()
    assert set(completion.text.split()) <= set(tokenizer.get_vocab())


def test_without_a_chat_template_it_sends_the_plain_prompt(plain_model_dir: Path) -> None:
    client = LocalModelClient(model_path=str(plain_model_dir), max_new_tokens=5)

    assert client.complete("think step by step").input_tokens == 4
    assert client.complete("think step by step", system="be short").input_tokens == 6


def test_the_same_seed_gives_the_same_answers_in_the_same_order(model_dir: Path) -> None:
    first = LocalModelClient(model_path=str(model_dir), max_new_tokens=8, seed=7)
    second = LocalModelClient(model_path=str(model_dir), max_new_tokens=8, seed=7)

    answers_a = [first.complete("propose a new instruction").text for _ in range(2)]
    answers_b = [second.complete("propose a new instruction").text for _ in range(2)]

    assert answers_a == answers_b
    assert answers_a[0] != answers_a[1], "successive calls draw from successive seeds"


def test_a_different_seed_gives_a_different_answer(model_dir: Path) -> None:
    one = LocalModelClient(model_path=str(model_dir), max_new_tokens=8, seed=1).complete("propose a new instruction")
    two = LocalModelClient(model_path=str(model_dir), max_new_tokens=8, seed=2).complete("propose a new instruction")

    assert one.text != two.text


def test_it_leaves_the_global_torch_rng_untouched(model_dir: Path) -> None:
    client = LocalModelClient(model_path=str(model_dir), max_new_tokens=4)
    before = torch.random.get_rng_state()

    client.complete("hello")

    assert torch.equal(before, torch.random.get_rng_state())


def test_greedy_decoding_at_temperature_zero_is_repeatable(model_dir: Path) -> None:
    client = LocalModelClient(model_path=str(model_dir), max_new_tokens=6, temperature=0.0, seed=0)

    assert client.complete("check the facts").text == client.complete("check the facts").text


def test_an_answer_that_is_only_end_of_sequence_raises_optimizer_error(silent_model_dir: Path) -> None:
    client = LocalModelClient(model_path=str(silent_model_dir), max_new_tokens=6, temperature=0.0)

    with pytest.raises(OptimizerError, match="empty answer after 1 tokens"):
        client.complete("propose a new instruction")


def test_build_optimizer_makes_a_local_client_from_the_config(model_dir: Path) -> None:
    config = OptimizerConfig(provider="local", local_model_path=str(model_dir), local_max_new_tokens=3)

    client = build_optimizer(config)

    assert isinstance(client, LocalModelClient)
    assert client.complete("hello").output_tokens == 3


def test_build_optimizer_refuses_local_without_a_model_path() -> None:
    with pytest.raises(ValueError, match="local_model_path"):
        build_optimizer(OptimizerConfig(provider="local", local_model_path=None))


@pytest.mark.slow
def test_importing_the_optimizers_package_does_not_import_torch() -> None:
    code = "import sys, inspo_engine.optimizers; print('torch' in sys.modules, 'transformers' in sys.modules)"
    repo_root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo_root)

    assert result.stdout.split() == ["False", "False"]
