"""The demo models' byte-level BPE tokenizer, trained on a seeded synthetic corpus."""

from __future__ import annotations

import json
import random
from pathlib import Path

from ppspec_cli.demo.common import BOS_TOKEN, EOS_TOKEN, MAX_POSITIONS, VOCAB_SIZE, write_json


def _corpus(seed: int) -> list[str]:
    """Synthetic English-ish text: a fixed word list plus seeded pseudo-words."""
    rng = random.Random(seed)
    words = (
        "the quick brown fox jumps over a lazy dog and pipeline parallel speculative decoding "
        "draft token target model stage layer hidden state eagle accept reject cpu engine "
        "one two three four five six seven eight nine ten hello world test demo"
    ).split()
    letters = "abcdefghijklmnopqrstuvwxyz"
    words += ["".join(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(2000)]
    lines = []
    for _ in range(3000):
        line = " ".join(rng.choice(words) for _ in range(rng.randint(4, 24)))
        lines.append(line.capitalize() + rng.choice([".", ".", "?", "!", ","]))
    return lines


def write_tokenizer(out: Path) -> None:
    """Byte-level BPE trained on the seeded corpus, padded with added tokens to exactly VOCAB_SIZE."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - 64,  # leave room so the padding step below is always exercised
        special_tokens=[BOS_TOKEN, EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(7), trainer)
    have = tok.get_vocab_size(with_added_tokens=True)
    tok.add_tokens([f"<extra_{i}>" for i in range(VOCAB_SIZE - have)])
    if tok.get_vocab_size(with_added_tokens=True) != VOCAB_SIZE:
        raise RuntimeError("demo tokenizer vocab does not match the model vocab")
    # Re-serialise with sorted keys: identical bytes regardless of map iteration order.
    write_json(out / "tokenizer.json", json.loads(tok.to_str()))
    write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "pad_token": EOS_TOKEN,
            "model_max_length": MAX_POSITIONS,
            "add_bos_token": False,
            "clean_up_tokenization_spaces": False,
        },
    )
