"""Solutions to the exercises of 00_preflight (run by tests/test_solutions.py)."""

from tokenizers import Tokenizer

from qwen3_trn_helpers.assets import QWEN3_MODEL_VOCAB, ensure_tokenizer


def exercise_1() -> tuple[int, list[str]]:
    """Token count of a one-turn chat message, and which tokens are special."""
    tok = Tokenizer.from_file(str(ensure_tokenizer() / "tokenizer.json"))
    enc = tok.encode("<|im_start|>user\nHow fast is Trainium2?<|im_end|>")
    special = [t for t, i in zip(enc.tokens, enc.ids, strict=True) if i >= 151643]
    return len(enc.ids), special


def exercise_2() -> int:
    """Embedding rows the tokenizer never produces (padding to a multiple of 128)."""
    tok = Tokenizer.from_file(str(ensure_tokenizer() / "tokenizer.json"))
    return QWEN3_MODEL_VOCAB - tok.get_vocab_size()


if __name__ == "__main__":
    print(exercise_1(), exercise_2())
