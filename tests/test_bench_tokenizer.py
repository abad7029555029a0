"""`course.py bench tokenizer`'s check, kept true: unit 08's reference BPE and Hugging Face
`tokenizers` learn the same merges on a small text, up to the first tied count (their tie
rules differ). The timing half of the benchmark asserts nothing and is not run here."""

from __future__ import annotations

import pytest

from autograder.engine.reference import load_reference
from autograder.tools.bench import MergesDiffer, compare_merges, first_tie, gpt2_byte_alphabet, hf_bpe
from coursekit.corpus import stdlib_split

TEXT_CHARS = 20_000  # the first training files: a few hundred merges before counts tie


@pytest.fixture(scope="module")
def text():
    return stdlib_split(TEXT_CHARS)[0][:TEXT_CHARS]


def test_the_reference_and_hugging_face_learn_the_same_merges_until_counts_tie(text):
    result = compare_merges(text, 512)
    assert result["untied"] >= 20 and result["merges"] == result["hf_merges"] == 256


def test_a_trainer_that_orders_two_merges_differently_is_caught(text):
    train_bpe = load_reference("08_training").train_bpe

    def swapped(text, vocab_size):  # the pair learned fourth comes third: a wrong count rule would do this
        merges = train_bpe(text, vocab_size)
        merges[2], merges[3] = merges[3], merges[2]
        return merges

    with pytest.raises(MergesDiffer, match="merge 2 differs before any tie"):
        compare_merges(text, 512, train_bpe=swapped)


def test_a_text_full_of_ties_is_refused_rather_than_taken_as_agreement():
    with pytest.raises(MergesDiffer, match="tied counts at merge 0"):
        compare_merges("ab cd ab cd", 300)  # (a, b) and (c, d) tie from the start


def test_the_byte_alphabet_is_hugging_faces_and_the_tie_finder_sees_ties():
    from tokenizers import pre_tokenizers

    alphabet = gpt2_byte_alphabet()
    assert sorted(alphabet.values()) == list(range(256))
    assert set(alphabet) == set(pre_tokenizers.ByteLevel.alphabet())
    assert alphabet["\u0120"] == ord(" ") and alphabet["a"] == ord("a")  # GPT-2's "Ġ" is the space
    _, merges = hf_bpe("hello all ill", 260)
    assert merges == [(b"l", b"l")]  # three times; every other pair once, which is never merged
    pretokenize = load_reference("08_training").pretokenize
    assert first_tie("aab aab ab", [(97, 98)], pretokenize) == 1  # (a, b) 3 times, (a, a) twice: no tie
    assert first_tie("ab cd ab cd", [(97, 98)], pretokenize) == 0
