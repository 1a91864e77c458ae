"""Solutions to the exercises of 00_preflight (tested by tests/core/lessons/test_solutions.py)."""

from tokenizers import Tokenizer

from qwen3_trn_helpers import PRESETS, ensure_tokenizer

CHAT = "<|im_start|>user\nHow fast is Trainium2?<|im_end|>"


def exercise_1() -> tuple[int, list[str], int]:
    """Tokens of the chat line, its special tokens, and the count with a 6-digit number.

    11 tokens, 2 of them special. Qwen splits digits one by one, and its pattern keeps a
    space before a digit as a token of its own: "In 123456 steps," adds "In", the space,
    six digits, " steps" and ",", and "How" becomes " how": 21 tokens.
    """
    tok = Tokenizer.from_file(str(ensure_tokenizer() / "tokenizer.json"))
    ids = tok.encode(CHAT).ids
    special = [tok.id_to_token(i) for i in ids if i >= 151643]
    with_number = tok.encode(CHAT.replace("How fast", "In 123456 steps, how fast")).ids
    return len(ids), special, len(with_number)


def exercise_2() -> dict[str, float]:
    """Share of the parameters in the (tied) embedding table, tiny preset and Qwen3-4B.

    96% of the tiny model is its vocabulary: on a CPU most of the time goes into the
    151,936-way output layer and its softmax, not the 4 transformer layers. For the 4B
    the table is under a tenth of the model.
    """
    shares = {}
    for name in ("tiny", "4b"):
        shape = PRESETS[name].shape
        shares[name] = shape.vocab_size * shape.dim / shape.parameter_count()
    return shares


def predict_first() -> int:
    """Tokens in "12345": 5. Qwen's pre-tokenizer takes one digit at a time (GPT-4's
    groups up to three), so every number costs as many tokens as it has digits."""
    tok = Tokenizer.from_file(str(ensure_tokenizer() / "tokenizer.json"))
    return len(tok.encode("12345").ids)
