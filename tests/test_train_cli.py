"""`python3 course.py train` on the CPU, made tiny: the corpus cut to a few files a side, a
vocabulary of 300, a one-layer model, three steps. (The real `--minutes 2 --device cpu` run
tokenizes 32 MB and takes two minutes: its figures are on the issue, not in the suite.)"""

from __future__ import annotations

import json
import math
import re

import pytest

from autograder.tools import train
from coursekit import corpus

TINY = train.Recipe(vocab_size=300, bpe_chars=20_000, model=dict(context_length=16, d_model=16, n_layers=1, n_heads=2),
                    batch_size=4, warmup_steps=1, evaluations=3, heldout_tokens=8 * 16 + 1, timing_steps=2,
                    sample_tokens=4)
SMALL_SPLIT = 40_000  # characters a side: whole files, a few of each
LAST_LINE = re.compile(r"held-out loss (\d+\.\d+) nats/token = (\d+\.\d+) nats/byte \(unigram (\d+\.\d+), "
                       r"bigram (\d+\.\d+) nats/byte\) after (\d+) steps, [\d,]+ tokens/s on CPU.*")


@pytest.fixture
def tiny_course_train(monkeypatch, tmp_path):
    """`course.py train`'s own entry point, on a small split, the tiny recipe and a scratch folder."""
    split = corpus.stdlib_split
    monkeypatch.setattr(corpus, "stdlib_split", lambda max_chars=None: split(SMALL_SPLIT))
    monkeypatch.setitem(train.RECIPES, "cpu", TINY)
    monkeypatch.setattr(train, "RUNS", tmp_path / "runs")
    monkeypatch.setattr(train, "CACHE", tmp_path / "tokens")
    return tmp_path


def test_course_train_steps_runs_the_recipe_and_ends_with_the_usual_line(tiny_course_train, capsys):
    # --minutes counts from the process start, and pytest may have run for a while: a wide limit
    assert train.main(["--steps", "3", "--device", "cpu", "--minutes", "120"]) == 0
    first = capsys.readouterr().out.splitlines()
    match = LAST_LINE.fullmatch(first[-1])
    assert match, first[-1]
    per_token, per_byte, unigram, bigram, steps = match.groups()
    assert int(steps) == 3
    assert 0 < float(per_byte) < float(per_token)  # more than one byte a token
    assert float(bigram) < float(unigram)
    assert any(line.startswith("BPE: ") for line in first), "the first run learns the merges"
    assert any(line.startswith("encoded the training text") for line in first)

    records = list((tiny_course_train / "runs").glob("train-*.json"))
    assert len(records) == 1 and list((tiny_course_train / "runs").glob("train-*.png"))
    record = json.loads(records[0].read_text())
    assert len(record["losses"]) == 3 and record["vocab_size"] == 300
    assert [step for step, _ in record["held_out"]] == [1, 2, 3]  # three evaluations in three steps
    assert record["held_out_nats_per_byte"] == pytest.approx(record["held_out_loss"] / record["held_bytes_per_token"],
                                                             abs=1e-3)
    assert 0 < record["token_unigram"] and any(line.startswith("bars on the same held-out bytes") for line in first)
    assert isinstance(record["sample"], str) and record["sample"].startswith("def ")

    # A second run starts from the cache: nothing learned or encoded again, the same result.
    assert train.main(["--steps", "3", "--device", "cpu", "--minutes", "120"]) == 0
    second = capsys.readouterr().out.splitlines()
    assert not any(line.startswith(("BPE: ", "encoded ")) for line in second), second[:3]
    assert LAST_LINE.fullmatch(second[-1]).group(1) == per_token  # fixed seeds: the same held-out loss


def test_the_cached_ids_are_the_reference_encoding_and_a_new_vocabulary_is_a_new_key(tmp_path):
    from autograder.engine.reference import load_reference
    from autograder.tools.tokenized_corpus import ids_for, merges_for

    ref = load_reference("08_training")
    text = corpus.stdlib_split(SMALL_SPLIT)[0][:5_000]
    merges = merges_for(text, 280, ref.train_bpe, tmp_path, log=lambda *_: None)
    assert [tuple(m) for m in ref.train_bpe(text, 280)] == merges
    ids = ids_for(text, merges, ref.encode, cache=tmp_path, log=lambda *_: None)
    assert ids_for(text, merges, lambda *_: pytest.fail("encoded again"), cache=tmp_path).tolist() == \
        ref.encode(text, merges) == ids.tolist()
    smaller = merges_for(text, 270, ref.train_bpe, tmp_path, log=lambda *_: None)
    assert smaller == merges[:14] and len(list(tmp_path.glob("merges-*.json"))) == 2


def test_the_byte_baselines_by_hand():
    """Training bytes "abab": add-one counts give P(b | a) = (2 + 1) / (2 + 256), and held-out "ab"
    is scored from its second byte; the unigram gives P(b) = (2 + 1) / (4 + 256)."""
    bars = corpus.byte_baselines(b"abab", b"ab")
    assert bars["bigram"] == pytest.approx(-math.log(3 / 258))
    assert bars["unigram"] == pytest.approx(-math.log(3 / 260))
