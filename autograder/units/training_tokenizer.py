"""Unit 08, first half: the byte-level BPE tokenizer's hidden checks and misconceptions.

The reference is the solution notebook (`solutions/08_training/training.ipynb`): every expected
answer is the reference's, on texts chosen so that the rules of the contract matter (ties among
the most frequent pairs, runs such as "aaaa" whose pairs overlap, characters of two to four UTF-8
bytes, pairs that only win when counted across two chunks, a text whose merges stop early, and
made-up words at Zipf-like rates for many merges). The texts are small enough that a plain answer,
which recounts every pair after each merge, takes well under a tenth of a second on any of them
(the time a call may take is 5 s).

The catalogued mistakes are wrong variants written here, each one mistake away from the
contract: a BPE trainer that recounts every pair after each merge (`bpe_with`), encoders that
apply the merges in another order (`encode_with`), decoders (`decode_with`) and splitting rules
(`pretokenize_with`). They are plain and slow on purpose: they only run on the checks' small
texts, and only for a failed check.

`pretokenize` and `train_bpe` take a `str` and an `int`, which a function cannot change, so they
have no inputs-unchanged check (it could not fail); `encode` and `decode` take lists, and their
check reads the lists as the call left them (`inputs_after`).
"""

from __future__ import annotations

from collections import Counter
from functools import partial

import numpy as np

from ..engine.compare import describe
from ..engine.probes import ProbeFailed
from ..engine.reference import load_reference
from ..engine.spec import (
    Check,
    Inputs,
    Misconception,
    Part,
    SampleBug,
    StepFailed,
    diagnose_facet,
    facet,
    facet_oracle,
)

UNIT_NAME = "08_training"

# The maintained library the exercise asks students not to use (Hugging Face `tokenizers`, which
# the course installs for `course.py bench tokenizer`): its Tokenizer, BPE model and trainer raise
# while train_bpe, encode and decode run, and so do its ready-made BPE tokenizers, which bound the
# BPE model when the library was imported (refused there, where they look it up). A teaching rule,
# as `forbid` is everywhere: a name the submission bound at import time keeps working.
FORBID = (
    "tokenizers.Tokenizer",
    "tokenizers.models.BPE",
    "tokenizers.trainers.BpeTrainer",
    "tokenizers.ByteLevelBPETokenizer",
    "tokenizers.implementations.ByteLevelBPETokenizer",
    *(f"tokenizers.implementations.{module}.BPE" for module in ("byte_level_bpe", "char_level_bpe",
                                                                   "sentencepiece_bpe")),
)


def reference():
    return load_reference(UNIT_NAME)


# ---------------------------------------------------------------- what is graded


def graded_parts() -> tuple[Part, ...]:
    """The graded parts: each check, what it shows, and its points. What the checks use (their
    inputs, diagnoses and probes) and the catalogue of mistakes they name are below; this is
    called at the end of the module, once all of it is defined."""
    PRETOKENIZE_CHECKS = (
        Check("contractions", "contractions: \"I'm sure it's fine, they'll say we've seen what you'd've done. DON'T\"",
              0.25, text_inputs("I'm sure it's fine, they'll say we've seen what you'd've done. DON'T SHOUT, IT'S "
                                "RUDE; 'quoted' words")),
        Check("unicode_letters", "letters of other scripts: café, naïve, 日本語, Ελληνικά", 0.25,
              text_inputs("café naïve Straße 日本語 Ελληνικά ÇA VA? ﬁne")),
        Check("digits", "digits and numbers: 2024, 3.14159, 1,000,000, ½ and ²", 0.25,
              text_inputs("In 2024, pi was 3.14159 and 1,000,000 people paid £12.50 for ½ or x² or ٣")),
        Check("white_space", "runs of spaces, tabs and newlines", 0.5,
              text_inputs("a  b   c\t\td\n\n  e \n f\r\n   \tg  ")),
        Check("code", "Python code with indentation", 0.5, text_inputs(CODE)),
        Check("concatenation", "joined, the chunks give the text back (a text of every kind of character)", 0.25,
              text_inputs(UNSEEN + CODE_UNSEEN), probe=concatenation_probe, oracle=facet_oracle),
    )

    TRAIN_CHECKS = (
        Check("ties", "\"ab ab ba ba cd cd dc dc xy yx zab zab\": ties at every step", 1,
              text_inputs("ab ab ba ba cd cd dc dc xy yx zab zab", 270)),
        Check("overlapping", "runs of one letter (\"aaaa\": its pairs overlap)", 0.75,
              text_inputs("aaaa aaa aaaaaa aa bb bbbbbb aaaaa baaab", 300)),
        Check("prose", "English prose (about 800 characters), vocab_size 320", 1, text_inputs(PROSE, 320)),
        Check("generated", "2,500 characters of made-up words at Zipf-like rates, vocab_size 340", 1,
              generated_inputs(340)),
        Check("code", "Python code, vocab_size 300", 1, text_inputs(CODE, 300)),
        Check("utf8", "characters of 2, 3 and 4 UTF-8 bytes (é, 日, 🙂)", 0.75, text_inputs(UTF8, 300)),
        Check("across_chunks", "\"x. y. x, y, 1.5 2.5 3.5\": pairs that win only if counted across chunks", 1,
              text_inputs("x. y. x, y, x. 1.5 2.5 3.5 to.do to.do", 280)),
        Check("early_stop", "\"hello hello\" with vocab_size 1000: training stops when no pair occurs twice", 0.75,
              text_inputs("hello hello", 1000)),
        Check("limit", "English prose with vocab_size 261: exactly 5 merges", 0.5, text_inputs(PROSE, 261)),
        Check("no_merges", "vocab_size 256: no merges at all", 0.25, text_inputs("aaaa bbbb aaaa", 256)),
    )

    ENCODE_CHECKS = (
        Check("unseen", "merges learned from English prose, text never seen (accents, CJK, emoji, CRLF)", 0.75,
              encode_inputs(UNSEEN, PROSE, 320)),
        Check("each_call_its_merges", "one text encoded with some merges, then with none, then with those merges "
              "again: each call follows the merges it is given", 0.25, encode_inputs(FRESH_TEXT, PROSE, 300),
              probe=each_call_probe, oracle=facet_oracle),
        Check("code", "merges learned from one piece of code, another piece of code encoded", 1,
              encode_inputs(CODE_UNSEEN, CODE, 300)),
        Check("order", "the merges' order matters: \"abcd\" runs whose pairs were learned in another order, and "
              "\"bcbcd\", whose most frequent known pair is not its earliest merge", 1,
              encode_inputs("abcd bcd abc cd abcd dabc zabcd bcbcd", "cd cd cd cd bc bc bc ab ab abcd abcd", 270)),
        Check("overlapping", "runs of one letter, \"aaaaaaa\"", 0.5,
              encode_inputs("aaaaaaa aaa baaaab aa", "aaaa aaa aaaaaa aa aaaa", 262)),
        Check("utf8", "characters of 2, 3 and 4 bytes, merges learned from other such text", 0.5,
              encode_inputs("héllo 日本 🙂🙂, naïve brûlée, 東京 日 ñ", UTF8, 300)),
        Check("generated", "merges learned from 2,500 characters of made-up words (vocab_size 340), 1,700 others "
              "encoded", 0.5, generated_encode_inputs(340)),
        Check("empty", "the empty text", 0.25, encode_inputs("", PROSE, 280)),
        Check("inputs_unchanged", "the merges list is not modified", 0.25, encode_inputs(UNSEEN, PROSE, 300),
              probe=unchanged_probe("encode", "the merges"), oracle=facet_oracle, requires=("empty",)),
    )

    DECODE_CHECKS = (
        Check("round_trip", "odd text, never seen: combining marks, ZWJ emoji, flags, RTL, NUL, \"\\r\\n\", U+10FFFD",
              0.75, decode_inputs(ODD, PROSE, 300)),
        Check("split_characters", "tokens that each hold half a character (' \\xc3' then '\\xa9')", 0.5,
              decode_inputs(" é à ñ ü ö é", SPLIT_TRAIN, 262)),
        Check("cut_character", "ids that end in the middle of '本': U+FFFD, not an error", 0.5,
              decode_inputs("日本", UTF8, 300, cut=1)),
        Check("inputs_unchanged", "the ids and merges are not modified", 0.25, decode_inputs(UNSEEN, PROSE, 300),
              probe=unchanged_probe("decode", "the ids or the merges"), oracle=facet_oracle, requires=("round_trip",)),
    )

    return (
        Part("pretokenize", checks=PRETOKENIZE_CHECKS, diagnose=diagnose_chunks, locate=locate_pretokenize),
        Part("train_bpe", checks=TRAIN_CHECKS, diagnose=diagnose_merges, uses=("pretokenize",), forbid=FORBID,
             locate=locate_train_bpe),
        Part("encode", checks=ENCODE_CHECKS, diagnose=diagnose_ids, uses=("pretokenize",), forbid=FORBID,
             locate=locate_encode),
        Part("decode", checks=DECODE_CHECKS, diagnose=diagnose_text, forbid=FORBID, locate=locate_decode),
    )


# ---------------------------------------------------------------- the texts

# Training text: English prose whose words repeat at different rates, with punctuation, digits
# and contractions.
PROSE = (
    "The tokenizer reads the text, then the tokenizer splits the text into chunks. "
    "Each chunk is a word, a number or a run of symbols; the space before a word goes with the word. "
    "It's the same rule GPT-2 used, and it's why the merges never cross the end of a word. "
    "Then the trainer counts the pairs: the pair that occurs most often is merged first, "
    "and the new token is counted again with its neighbours. In 2019 there were 50,257 tokens; "
    "here there are 300 or 320. The rarest pairs are never merged, and that's fine: "
    "they're still written down, one byte at a time. "
    "We've seen the trainer, we'll see the encoder, and they'd better agree."
)

# Text the merges never saw: other words, characters absent from PROSE (accents, CJK, emoji,
# Greek), other digits, and white space of every kind.
UNSEEN = (
    "Zürich's naïve café served crème brûlée to 1,024 guests; the théâtre closed at 23:59.\n"
    "\tThe encoder met 日本語 and Ελληνικά, 🙂 and 🇫🇷, tokens it had never counted —  and  spaces  too.\n"
    "THE TOKENIZER'S RULE: it's the same chunks, they'll say, whatever the text.\r\n"
)

CODE = '''def count_pairs(words):
    counts = {}
    for word, n in words.items():
        for a, b in zip(word, word[1:]):
            counts[a, b] = counts.get((a, b), 0) + n
    return counts


def merge(word, pair, new_id):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out
'''

CODE_UNSEEN = '''class Counter(dict):
    """Count the items of an iterable."""

    def __init__(self, items=()):
        for item in items:
            self[item] = self.get(item, 0) + 1

    def most_common(self, n=None):
        ranked = sorted(self.items(), key=lambda kv: -kv[1])
        return ranked if n is None else ranked[:n]
'''

# Multi-byte characters, and a few pairs tied for most frequent.
UTF8 = ("héllo wörld, ñandú, 日本語 日本 東京 日本, 🙂🙂 🙂 naïve café héllo, "
        "crème brûlée, Ωμέγα Ωμέγα, wörld héllo 🙂")


def generated_text(rng, words: int = 450) -> str:
    """About 2,500 characters of made-up words drawn at Zipf-like rates (a few very common, most
    rare), with punctuation, numbers and line breaks: many merges, and many ties among the rare."""
    syllables = ["ka", "to", "ri", "ne", "sa", "mu", "lo", "pe", "chi", "an", "or", "us", "é", "ß", "th", "qu"]
    lexicon = ["".join(rng.choice(syllables, size=int(rng.integers(1, 4)))) for _ in range(150)]
    weights = np.arange(1, len(lexicon) + 1) ** -0.8
    picks = rng.choice(len(lexicon), size=words, p=weights / weights.sum())
    out = []
    for i, k in enumerate(picks):
        word = lexicon[k].capitalize() if i % 11 == 0 else lexicon[k]
        tail = [", ", ". ", " ", " ", " ", " ", "\n", f" {int(rng.integers(0, 2000))} "][int(rng.integers(0, 8))]
        out.append(word + tail)
    return "".join(out)


def generated_inputs(vocab_size: int):
    return lambda rng: Inputs((generated_text(rng), vocab_size))


def generated_encode_inputs(vocab_size: int):
    """Merges learned from one generated text, another generated text (other rare words) to encode."""

    def make(rng):
        return Inputs((generated_text(rng, 300), reference().train_bpe(generated_text(rng), vocab_size)))

    return make


# ---------------------------------------------------------------- trusted helpers


def _pairs(ids):
    return zip(ids, ids[1:], strict=False)


def merge_pair(ids, pair, new_id, right_to_left=False):
    """`ids` with every occurrence of `pair` replaced by `new_id`, left to right ("aaa" -> [aa, a]),
    or right to left ([a, aa])."""
    seq = ids[::-1] if right_to_left else ids
    want = pair[::-1] if right_to_left else pair
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and (seq[i], seq[i + 1]) == want:
            out.append(new_id)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out[::-1] if right_to_left else out


def token_bytes(merges) -> list[bytes]:
    table = [bytes([i]) for i in range(256)]
    for a, b in merges:
        table.append(table[a] + table[b])
    return table


def count_pairs(words, overlapping=True) -> Counter:
    """(id_a, id_b) -> occurrences, over `words`, a list of (ids, how often the chunk occurs), in the
    order the pairs are first seen. Without `overlapping`, as bytes.count counts: "aaa" holds (a, a) once."""
    counts = Counter()
    for ids, n in words:
        if overlapping:
            for pair in _pairs(ids):
                counts[pair] += n
            continue
        for pair in dict.fromkeys(_pairs(ids)):
            i, found = 0, 0
            while i + 1 < len(ids):
                if (ids[i], ids[i + 1]) == pair:
                    found, i = found + 1, i + 2
                else:
                    i += 1
            counts[pair] += n * found
    return counts


def best_pair(counts: Counter, table: list[bytes], tie: str):
    if tie == "bytes":  # the contract: the greatest (bytes_a, bytes_b)
        return max(counts, key=lambda p: (counts[p], table[p[0]], table[p[1]]))
    if tie == "smallest_bytes":
        return min(counts, key=lambda p: (-counts[p], table[p[0]], table[p[1]]))
    if tie == "ids":
        return max(counts, key=lambda p: (counts[p], p))
    if tie == "first_seen":  # max() keeps the first of equals: the pair seen first in the text
        return max(counts, key=counts.get)
    raise ValueError(tie)


def bpe_with(across=False, tie="bytes", overlapping=True, weighted=True, early_stop=True, extra_merges=0,
             right_to_left=False, new_bytes="ab"):
    """train_bpe, recounting every pair after each merge, with one rule changed (`new_bytes`: how a new
    token's bytes are made from its pair's, "ab" the contract's vocab[a] + vocab[b])."""

    def variant(ref, text, vocab_size):
        chunks = Counter([text] if across else ref.pretokenize(text))
        words = [(list(chunk.encode("utf-8")), n if weighted else 1) for chunk, n in chunks.items()]
        table = token_bytes([])
        merges = []
        while len(merges) < vocab_size - 256 + extra_merges:
            counts = count_pairs(words, overlapping)
            if not counts:
                break
            pair = best_pair(counts, table, tie)
            if counts[pair] < (2 if early_stop else 1):
                break
            merges.append(pair)
            halves = {"ab": (pair[0], pair[1]), "ba": (pair[1], pair[0]), "a": (pair[0],), "b": (pair[1],)}
            table.append(b"".join(table[i] for i in halves[new_bytes]))
            words = [(merge_pair(ids, pair, len(table) - 1, right_to_left), n) for ids, n in words]
        return merges

    return variant


def encode_chunk_by_rank(ids, rank, pick=min, right_to_left=False):
    while len(ids) > 1:
        present = [p for p in _pairs(ids) if p in rank]
        if not present:
            break
        pair = pick(present, key=rank.get)
        ids = merge_pair(ids, pair, 256 + rank[pair], right_to_left)
    return ids


def encode_with(mode: str):
    """encode, with the merges applied in another way than the contract's."""

    def variant(ref, text, merges):
        merges = [tuple(m) for m in merges]
        rank = {pair: i for i, pair in enumerate(merges)}
        chunks = [list(c.encode("utf-8")) for c in ([text] if mode == "across" else ref.pretokenize(text))]
        if mode == "chunk_frequency":  # in each chunk, the learned pair most frequent in that chunk first
            out = []
            for ids in chunks:
                while counts := Counter(p for p in _pairs(ids) if p in rank):
                    pair = min(counts, key=lambda p: (-counts[p], rank[p]))
                    ids = merge_pair(ids, pair, 256 + rank[pair])
                out += ids
            return out
        if mode == "frequency":  # the learned pair most frequent in this text first, over all the chunks
            while True:
                counts = Counter(p for ids in chunks for p in _pairs(ids) if p in rank)
                if not counts:
                    break
                pair = min(counts, key=lambda p: (-counts[p], rank[p]))
                chunks = [merge_pair(ids, pair, 256 + rank[pair]) for ids in chunks]
            return [i for ids in chunks for i in ids]
        out = []
        for ids in chunks:
            if mode == "across":
                ids = encode_chunk_by_rank(ids, rank)
            elif mode == "right_to_left":
                ids = encode_chunk_by_rank(ids, rank, right_to_left=True)
            elif mode == "last_merge_first":
                ids = encode_chunk_by_rank(ids, rank, pick=max)
            elif mode == "greedy_left":  # the leftmost learned pair, whatever its rank
                while True:
                    at = next((i for i, p in enumerate(_pairs(ids)) if p in rank), None)
                    if at is None:
                        break
                    ids = ids[:at] + [256 + rank[(ids[at], ids[at + 1])]] + ids[at + 2:]
            elif mode == "longest_match":  # the longest known token at each position
                table = token_bytes(merges)
                known = {}
                for i, b in enumerate(table):
                    known.setdefault(b, i)
                data, ids, at = bytes(ids), [], 0
                while at < len(data):
                    end = max(e for e in range(at + 1, len(data) + 1) if data[at:e] in known)
                    ids.append(known[data[at:end]])
                    at = end
            else:
                raise ValueError(mode)
            out.extend(ids)
        return out

    return variant


def decode_with(mode: str):
    def variant(ref, ids, merges):
        table = token_bytes(merges)
        if mode == "separately":
            return "".join(table[i].decode("utf-8", errors="replace") for i in ids)
        data = b"".join(table[i] for i in ids)
        if mode == "latin1":
            return data.decode("latin-1")
        return data.decode("utf-8", errors=mode)  # "ignore", "strict"

    return variant


def pretokenize_with(mode: str):
    def variant(ref, text):
        import regex

        if mode == "str_split":
            return text.split()
        pattern, flags = ref.GPT2_PATTERN, 0
        edits = {
            "ascii": [(r"\p{L}", "a-zA-Z"), (r"\p{N}", "0-9"), (r" ?a-zA-Z+", " ?[a-zA-Z]+"),
                      (r" ?0-9+", " ?[0-9]+")],
            "no_lookahead": [(r"\s+(?!\S)|", "")],
            "no_leading_space": [(" ?", "")],
        }.get(mode, [])
        for old, new in edits:
            if old not in pattern:
                raise ValueError(f"the reference's pattern no longer holds {old!r}")
            pattern = pattern.replace(old, new)
        if mode == "case_insensitive":
            flags = regex.IGNORECASE
        return regex.findall(pattern, text, flags=flags)

    return variant


# ---------------------------------------------------------------- comparing answers


def _int_list(value):
    """A list of Python ints from a list, tuple or 1-D array of integers; None if it is not one."""
    if hasattr(value, "tolist") and getattr(value, "ndim", 1) == 1:
        value = value.tolist()
    if not isinstance(value, list | tuple):
        return None
    out = []
    for v in value:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            return None
        out.append(v.__index__())
    return out


def _show(text: str, at: int, width: int = 12) -> str:
    return repr(text[max(0, at - width):at + width])


def diagnose_chunks(result, expected, inputs: Inputs, tol) -> str | None:
    if isinstance(expected, dict):
        return diagnose_facet(result, expected, "the chunks")
    if not isinstance(result, list | tuple) or not all(isinstance(c, str) for c in result):
        return f"pretokenize returned {describe(result)}, expected a list of strings"
    result = list(result)
    if result == expected:
        return None
    text = inputs.args[0]
    if "".join(result) != text:
        return concatenation_problem(result, text)
    at = next((i for i, (a, b) in enumerate(zip(result, expected, strict=False)) if a != b),
              min(len(result), len(expected)))
    yours = result[at:at + 3]
    wanted = expected[at:at + 3]
    return f"chunk {at} on: yours are {yours}, expected {wanted} ({len(result)} chunks, expected {len(expected)})"


def concatenation_problem(chunks, text) -> str:
    joined = "".join(chunks)
    at = next((i for i, (a, b) in enumerate(zip(joined, text, strict=False)) if a != b), min(len(joined), len(text)))
    return (f"joined, the chunks are not the text: from character {at} the text is {_show(text, at)}, the chunks "
            f"give {_show(joined, at)} (every character, white space included, belongs to exactly one chunk)")


def concatenation_probe(api, inputs: Inputs):
    chunks = api.call("pretokenize", *inputs.args)
    text = inputs.args[0]
    if not isinstance(chunks, list | tuple) or not all(isinstance(c, str) for c in chunks):
        return facet(False, "type", f"pretokenize returned {describe(chunks)}, expected a list of strings")
    joined = "".join(chunks)
    if joined == text:
        return facet(True, None)
    at = next((i for i, (a, b) in enumerate(zip(joined, text, strict=False)) if a != b), min(len(joined), len(text)))
    return facet(False, at, concatenation_problem(chunks, text))


def _pair_text(pair, table) -> str:
    try:
        return f"({pair[0]}, {pair[1]}) = ({table[pair[0]]!r}, {table[pair[1]]!r})"
    except (IndexError, TypeError):
        return f"({pair[0]}, {pair[1]})"


def diagnose_merges(result, expected, inputs: Inputs, tol) -> str | None:
    pairs = None
    if isinstance(result, list | tuple):
        pairs = [_int_list(m) for m in result]
        if any(p is None or len(p) != 2 for p in pairs):
            pairs = None
    if pairs is None:
        return f"train_bpe returned {describe(result)}, expected a list of (id_a, id_b) pairs"
    pairs = [tuple(p) for p in pairs]
    expected = [tuple(p) for p in expected]
    if pairs == expected:
        return None
    text, vocab_size = inputs.args
    at = next((i for i, (a, b) in enumerate(zip(pairs, expected, strict=False)) if a != b), None)
    if at is None:  # one list starts the other
        n = len(expected)
        if len(pairs) > n:
            why = (f"vocab_size = {vocab_size} allows {vocab_size - 256} merges (ids 0-255 are the bytes)"
                   if n == vocab_size - 256 else f"after merge {n} no pair occurs twice any more, so training stops")
            return f"{len(pairs)} merges, expected {n}: the first {n} are right, but {why}"
        k = len(pairs)
        done = {0: "no merges", 1: "only 1 merge, and it is right"}.get(k, f"only {k} merges, and they are right")
        return (f"{done}; expected {n}: merge {k}, {_pair_text(expected[k], token_bytes(expected))}, still occurs "
                f"{pair_counts_after(text, expected[:k])[expected[k]]} times")
    table = token_bytes(expected[:at])
    counts = pair_counts_after(text, expected[:at])
    yours, wanted = pairs[at], expected[at]
    head = f"merge {at} is {_pair_text(yours, table)}, expected {_pair_text(wanted, table)}"
    if yours not in counts:
        return (f"{head}: yours never occurs inside one chunk at that point (pairs are counted within the chunks "
                "pretokenize gives, never across two)")
    if counts[yours] == counts[wanted]:
        return (f"{head}: both occur {counts[wanted]} times, a tie, which goes to the greatest pair of byte "
                "strings, (bytes_a, bytes_b)")
    return f"{head}: yours occurs {counts[yours]} times, the expected one {counts[wanted]} times"


def pair_counts_after(text: str, merges) -> Counter:
    """How often each pair occurs within the chunks of `text` once `merges` are made (the contract's counts)."""
    ids = reference().encode(text, merges)
    words, at = [], 0
    table = token_bytes(merges)
    for chunk in reference().pretokenize(text):
        size, word = len(chunk.encode("utf-8")), []
        while size > 0:
            word.append(ids[at])
            size, at = size - len(table[ids[at]]), at + 1
        words.append((word, 1))
    return count_pairs(words)


def diagnose_ids(result, expected, inputs: Inputs, tol) -> str | None:
    if isinstance(expected, dict):
        return diagnose_facet(result, expected, "the call")
    ids = _int_list(result)
    if ids is None:
        return f"encode returned {describe(result)}, expected a list of ints"
    if ids == expected:
        return None
    merges = inputs.args[1]
    table = token_bytes(merges)
    if any(not 0 <= i < len(table) for i in ids):
        bad = next(i for i in ids if not 0 <= i < len(table))
        return f"id {bad} is not a token: with {len(merges)} merges the ids run from 0 to {len(table) - 1}"
    at = next((i for i, (a, b) in enumerate(zip(ids, expected, strict=False)) if a != b), min(len(ids), len(expected)))
    yours = [table[i] for i in ids[at:at + 3]]
    wanted = [table[i] for i in expected[at:at + 3]]
    return (f"{len(ids)} ids, expected {len(expected)}; from id {at} on yours stand for {yours}, the expected "
            f"ones for {wanted}")


def diagnose_text(result, expected, inputs: Inputs, tol) -> str | None:
    if isinstance(expected, dict):
        return diagnose_facet(result, expected, "the call")
    if not isinstance(result, str):
        return f"decode returned {describe(result)}, expected a str"
    if result == expected:
        return None
    at = next((i for i, (a, b) in enumerate(zip(result, expected, strict=False)) if a != b),
              min(len(result), len(expected)))
    return (f"the text differs from character {at}: yours is {_show(result, at)}, expected {_show(expected, at)} "
            f"({len(result)} characters, expected {len(expected)})")


# ---------------------------------------------------------------- inputs left alone


def inputs_after(api, name: str, args: tuple) -> tuple:
    """The arguments as a call of `name` left them: read back from the student's worker, or
    (trusted code) the very objects the call was given."""
    if api.trusted:
        api.call(name, *args)
        return args
    outcome = api.student.call(name, *args, return_args=True, **api.options)
    if not outcome.ok:
        raise ProbeFailed(f"`{name}(...)`", outcome)
    return tuple(outcome.args_after)


def unchanged_probe(name: str, what: str):
    def probe(api, inputs: Inputs):
        import copy

        before = copy.deepcopy(inputs.args)
        after = inputs_after(api, name, inputs.args)
        same = _plain_list(list(after)) == _plain_list(list(before))
        return facet(same, None if same else "changed",
                     f"{name} changed {what} it was given (build new lists; leave the caller's alone)")

    return probe


FRESH_TEXT = "the cache: these merges, then none, then these merges again"


def each_call_probe(api, inputs: Inputs):
    """encode(text, merges), encode(text, []), encode(text, merges): a call follows its own merges,
    whatever the calls before it were given."""
    text, merges = inputs.args
    first = _int_list(api.call("encode", text, [tuple(m) for m in merges]))
    bare = _int_list(api.call("encode", text, []))
    again = _int_list(api.call("encode", text, [tuple(m) for m in merges]))
    raw = list(text.encode("utf-8"))
    if bare == raw and first == again:
        return facet(True, None)
    kept = (bare is not None and bare == first and first != raw) or (again is not None and again == raw != first)
    return facet(False, "kept" if kept else "other",
                 (f"encode(text, []) gave the ids the call just before gave for the same text with {len(merges)} "
                  "merges (or the other way round): something kept between calls remembers chunks encoded under "
                  "other merges (a cache at module level, or a default argument). Keep a cache inside one call, or "
                  "key it by the merges as well") if kept else
                 (f"with no merges, encode(text, []) should give the text's UTF-8 bytes ({len(raw)} ids); yours gave "
                  f"{describe(bare)}, and the same text with the same merges twice gave "
                  + ("the same ids" if first == again else "other ids the second time")))


def _plain_list(value):
    if isinstance(value, list | tuple):
        return [_plain_list(v) for v in value]
    return value


# ---------------------------------------------------------------- inputs of the checks


def text_inputs(text: str, *args):
    return lambda rng: Inputs((text, *args))


def encode_inputs(text: str, train_text: str, vocab_size: int):
    """`text` and the merges the reference learns from `train_text`."""

    def make(rng):
        return Inputs((text, reference().train_bpe(train_text, vocab_size)))

    return make


def decode_inputs(text: str, train_text: str, vocab_size: int, cut: int = 0):
    """The reference's ids of `text` (less the last `cut` bytes' worth) under merges learned from `train_text`."""

    def make(rng):
        ref = reference()
        merges = ref.train_bpe(train_text, vocab_size)
        ids = ref.encode(text, merges)
        if cut:
            ids = ids[:-1] + list(token_bytes(merges)[ids[-1]][:-cut])
        return Inputs((ids, merges))

    return make


# ---------------------------------------------------------------- where a wrong tokenizer goes wrong
# Each step tried on a text of a few characters made so that only that step shows: the answer's
# result against the reference's on it, and what that step's slips give instead.

PRETOKENIZE_STEPS = (  # (the step, a text that shows it, what to do)
    ("the white space", "a  b\tc\n", "joined, the chunks give the text back: spaces, tabs and newlines are chunks "
     "too (regex.findall with GPT-2's pattern, not str.split)"),
    ("the space before a word", "hello world 42 !?", "each of letters, digits and symbols takes one optional space in "
     "front (' ?\\p{L}+'), so ' world' is one chunk"),
    ("a run of spaces", "a   b", "of the spaces before a word, the last goes with the word: keep \\s+(?!\\S) "
     "before \\s+"),
    ("letters and digits of any script", "café 日本 ß ٣٤", "\\p{L} and \\p{N} match any script's letters and digits "
     "(the regex package), not [a-zA-Z] and [0-9]"),
    ("the contractions", "I'LL don't we'VE", "only lower-case 's 't 're 've 'm 'll 'd are contractions: the pattern is "
     "case-sensitive"),
)


def locate_pretokenize(call) -> str | None:
    ref = load_reference("08_training")
    for step, text, fix in PRETOKENIZE_STEPS:
        want, got = ref.pretokenize(text), call(text)
        got = list(got) if isinstance(got, list | tuple) else got
        if step == "the white space" and isinstance(got, list) and all(isinstance(c, str) for c in got) \
                and "".join(got) == text:
            continue  # nothing lost: how the spaces are cut, the next steps show
        if got != want:
            return f"{step}. On {text!r} GPT-2's pattern gives {want}; yours gives {_short(got)}: {fix}"
    return None


def _short(value) -> str:
    text = repr(list(value)) if isinstance(value, list | tuple) else repr(value) if isinstance(value, str) else \
        describe(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _as_ids(value) -> list[int] | None:
    return _int_list(value)


def _code_points(text: str, got) -> bool:
    return got == [ord(c) for c in text]


ENCODE_STEPS = (  # (the step, text, merges as byte strings, what it shows, when it applies)
    # Told only when the ids are the characters' code points: another slip fails here too.
    ("the bytes", "日本", [(b"\xe6", b"\x97")], "a chunk starts as its UTF-8 bytes, list(chunk.encode('utf-8')), "
     "not its characters' code points (ord(c)): 日 is the three bytes e6 97 a5", _code_points),
    ("the chunks", "the cat", [(b"e", b" ")], "a merge never joins two chunks ('the' and ' cat'): pretokenize, then "
     "merge inside each chunk", None),
    ("replacing the pair", "abab", [(b"a", b"b")], "a merge replaces every occurrence of its pair in the chunk, "
     "left to right, not only the first", lambda text, got: got == [256, 97, 98]),
    ("replacing the pair", "abab", [(b"a", b"b")], "after writing the new id, skip both ids of the pair: 'ab' "
     "becomes [ab], not [ab, b]", lambda text, got: got == [256, 98, 256, 98]),
    ("replacing the pair", "abab", [(b"a", b"b")], "a merge replaces each occurrence of its pair, left to right, "
     "with the one new id", None),
    ("the merge order", "bcd", [(b"c", b"d"), (b"b", b"c")], "the merges go in the order they were learned (the "
     "lowest index first), as training made them: not the leftmost pair first, nor the latest learned", None),
    ("the merge order", "abc", [(b"a", b"b"), (b"b", b"c")], "the merges go in the order they were learned (the "
     "lowest index first), not the last-learned first", None),
    ("a merge's direction", "aaa", [(b"a", b"a")], "a merge joins the pairs left to right, as training did: 'aaa' "
     "becomes [aa, a]", None),
    ("the merge order", "abcbcbc", [(b"a", b"b"), (b"b", b"c")], "the merges go in the order they were learned, "
     "however often a pair occurs in the text (or the chunk) being encoded", None),
    ("the merge loop's end", "ab", [(b"a", b"b")], "a chunk is merged for as long as it holds a learned pair, however "
     "short: two ids can become one (loop while len(ids) >= 2)", None),
)


def _merges_of(pairs) -> list[tuple[int, int]]:
    """Merges given as byte strings (b"c", b"d"), as ids: the first made 256, the next 257..."""
    table, merges = [bytes([i]) for i in range(256)], []
    for a, b in pairs:
        merges.append((table.index(a), table.index(b)))
        table.append(a + b)
    return merges


def locate_encode(call) -> str | None:
    ref = load_reference("08_training")
    # the calls' memory first: chunks kept from a call with other merges spoil every step after it
    text, merges = "qzx qzx", _merges_of([(b"q", b"z")])
    first, bare = _as_ids(call(text, list(merges))), _as_ids(call(text, []))
    raw = list(text.encode("utf-8"))
    if bare != raw and bare is not None and bare == first:
        return (f"the memory between calls. encode({text!r}, [(b'q', b'z')]) then encode({text!r}, []) should give "
                f"{ref.encode(text, merges)}, then the bytes {raw}; yours gives {_short(bare)} the second time, what "
                "the call before gave: chunks kept from a call with other merges (a cache at module level, or a "
                "default argument) are used again. Keep a cache inside one call, or key it by the merges as well")
    for step, text, pairs, fix, applies in ENCODE_STEPS:
        merges = _merges_of(pairs)  # as train_bpe gives them: a list of (id_a, id_b) tuples
        want, got = ref.encode(text, merges), _as_ids(call(text, list(merges)))
        if got != want and (applies is None or applies(text, got)):
            learned = ", ".join(f"({a!r}, {b!r})" for a, b in pairs)
            return (f"{step}. With the merges [{learned}] (learned in that order, ids 256 on), {text!r} encodes as "
                    f"{want}; yours gives {_short(got) if got is not None else describe(got)}: {fix}")
    return _shared_chunk_ids(call, ref)


# Chunks that differ only in their white space, one order and the other: " low" after "low", then
# "low" after " low"
SHARED_CHUNK_TEXTS = ("low low", " low (low")


def _shared_chunk_ids(call, ref) -> str | None:
    """The cache of chunk ids: a chunk given the ids of an earlier, other chunk (a cache keyed on the
    chunk stripped, or lowered, rather than on the chunk itself)."""
    merges = _merges_of([(b"l", b"o")])
    for text in SHARED_CHUNK_TEXTS:
        chunks = ref.pretokenize(text)
        own = [ref.encode(chunk, list(merges)) for chunk in chunks]
        want, got = [i for ids in own for i in ids], _as_ids(call(text, list(merges)))
        if got is None or got == want:
            continue
        for j in range(1, len(chunks)):
            for k in range(j):
                if own[k] != own[j] and got == [i for ids in own[:j] + [own[k]] + own[j + 1:] for i in ids]:
                    return (f"the cache of chunk ids. With the merges [(b'l', b'o')], {text!r} is the chunks "
                            f"{chunks} and encodes as {want}; yours gives chunk {chunks[j]!r} the ids of the earlier "
                            f"chunk {chunks[k]!r}, {own[k]}: the ids kept for one chunk are used for another that is "
                            "not the same (a cache keyed on chunk.strip() or chunk.lower(), not on the chunk). Key "
                            "the cache by the exact chunk")
    return None


def locate_decode(call) -> str | None:
    merges = _merges_of([(b"h", b"i"), (b"\xc3", b"\xa9")])
    for step, ids, want, fix in (
            ("the tokens' bytes", [256, 33], "hi!", "each id stands for its bytes (a merge's id for both halves' "
             "bytes): join them all, then decode"),
            ("the decoding", [0xC3, 0xA9], "é", "a character's UTF-8 bytes may be spread over several tokens: join "
             "every token's bytes first and decode the whole once, not token by token"),
            ("invalid bytes", [0xFF, ord("a")], "\ufffda", 'bytes that are not UTF-8 become U+FFFD: '
             'bytes.decode("utf-8", errors="replace"), not "ignore", not strict')):
        try:
            got = call(ids, list(merges))
        except StepFailed as err:
            got = f"an error: {err}"
        if got != want:
            if got == b"".join(token_bytes(merges)[i] for i in ids).decode("latin-1"):
                fix = "the bytes are UTF-8: decode them as UTF-8 (errors=\"replace\"), not latin-1"
            return f"{step}. decode({ids}) with merges {merges} is {want!r}; yours gives {_short(got)}: {fix}"
    return None


TRAIN_STEPS = (  # (the step, text, vocab_size, what to do)
    ("stopping early", "ab cd", 260, "once no pair occurs twice there is nothing worth merging: stop, even short of "
     "vocab_size"),
    ("the number of merges", "aaaa bbbb cccc dddd " * 3, 258, "vocab_size counts the 256 bytes too: learn "
     "vocab_size - 256 merges"),
    ("the chunks", "ae be ce de", 257, "pairs are counted inside each chunk of pretokenize only, never across two: "
     "(b'e', b' ') spans two chunks, and every pair inside one occurs once"),
    ("overlapping pairs", "aaa aaa xyxyxy", 257, "adjacent pairs overlap: 'aaa' holds (a, a) twice"),
    ("the counts' weights", "ab ab ab ab cd cde cdf", 257, "a chunk counts as often as it occurs in the text, not "
     "once per distinct chunk"),
    ("the tie-break", "ab ab cd cd", 257, "of equally frequent pairs take the greatest (bytes_a, bytes_b), compared as "
     "byte strings: max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]]))"),
)


NEW_ID_TEXT = "abab abab abab"  # merge 0 makes (a, b) = 256; merge 1 joins two of those: (256, 256)


def _new_id_step(call) -> str | None:
    """The new ids, where a wrong one makes train_bpe raise (the replay below tells one that does not):
    the first merge is right, but the second, which holds the first's token, raises."""
    ref = load_reference("08_training")
    first, want = call(NEW_ID_TEXT, 257), [tuple(m) for m in ref.train_bpe(NEW_ID_TEXT, 258)]
    if not isinstance(first, list | tuple) or [tuple(p) for p in first if isinstance(p, list | tuple)] != want[:1]:
        return None
    try:
        call(NEW_ID_TEXT, 258)
    except StepFailed as err:
        return (f"the new ids. train_bpe({NEW_ID_TEXT!r}, 258) learns {want}: merge 0 makes id 256, and merge 1 "
                f"joins two of those. With 257 yours learns {want[:1]}, but with 258 it raised {err}: the second "
                "merge holds the first merge's token, whose id is not in your vocabulary (an id one too high, taken "
                "as len(vocab) after appending the new token's bytes?). Merge i makes id 256 + i: take "
                "new = len(vocab) before appending to the vocabulary (or use 256 + i)")
    return None


def locate_train_bpe(call) -> str | None:
    ref = load_reference("08_training")
    new_id = _new_id_step(call)
    if new_id is not None:
        return new_id
    for step, text, vocab_size, fix in TRAIN_STEPS:
        want, got = ref.train_bpe(text, vocab_size), call(text, vocab_size)
        pairs = [tuple(p) for p in got] if isinstance(got, list | tuple) and all(
            isinstance(p, list | tuple) and len(p) == 2 for p in got) else None
        if step == "the number of merges" and pairs is not None and len(pairs) == len(want):
            continue  # which merges, the later steps show; here only how many
        if pairs != [tuple(m) for m in want]:
            shown_got = _short(pairs[:6] + (["..."] if len(pairs) > 6 else [])) if pairs is not None else _short(got)
            return (f"{step}. train_bpe({text!r}, {vocab_size}) learns {[tuple(m) for m in want]}; yours "
                    f"{shown_got} ({len(pairs) if pairs is not None else 'no'} merges): {fix}")
    for text, vocab_size in REPLAY_TEXTS:
        got = call(text, vocab_size)
        if isinstance(got, list | tuple) and all(isinstance(p, list | tuple) and len(p) == 2 for p in got):
            located = located_merge(ref, text, vocab_size, [tuple(p) for p in got])
            if located:
                return located
    return None


def merge_pair_without_skip(ids, pair, new_id):
    """A merge that steps one place on after a replacement, keeping the pair's second id: "ab" -> [ab, b]."""
    out = []
    for i, x in enumerate(ids):
        out.append(new_id if i + 1 < len(ids) and (x, ids[i + 1]) == pair else x)
    return out


def merge_first_only(ids, pair, new_id):
    """A merge that replaces the first occurrence of the pair only."""
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return ids[:i] + [new_id] + ids[i + 2:]
    return list(ids)


def count_once_per_chunk(words) -> Counter:
    """Each distinct pair counted once per chunk, however often it occurs there."""
    counts = Counter()
    for ids, n in words:
        for pair in dict.fromkeys(_pairs(ids)):
            counts[pair] += n
    return counts


# How a merge can be chosen or made otherwise than the contract's, as (the step, what it does
# instead, the fix): each a way to count the pairs, or to replace a merged pair, that the replay
# below tries at the first merge that departs.
COUNT_READINGS = (
    ("counting the pairs", "each distinct pair counted once per chunk", count_once_per_chunk,
     "count every occurrence: 'abab' holds (a, b) twice, 'aaaa' holds (a, a) three times"),
    ("counting the pairs", "pairs counted without overlap", lambda words: count_pairs(words, overlapping=False),
     "count every adjacent pair, zip(ids, ids[1:]): the pairs overlap"),
    ("counting the pairs", "each distinct chunk counted once", lambda words: count_pairs([(i, 1) for i, _ in words]),
     "weigh each chunk's pairs by how often the chunk occurs in the text"),
)
MERGE_READINGS = (
    ("replacing the pair", "a replaced pair's second id kept (the scan steps one place on, not two)",
     merge_pair_without_skip, "after writing the new id, skip both ids of the pair: 'ab' becomes [ab], not [ab, b]"),
    ("replacing the pair", "only the first occurrence in each chunk replaced", merge_first_only,
     "replace every occurrence of the pair in the chunk, left to right"),
    ("a merge's direction", "the pairs replaced right to left", partial(merge_pair, right_to_left=True),
     "replace the pairs left to right, as encode does: 'aaa' becomes [aa, a]"),
)
# How a new token's bytes can be made otherwise than vocab[a] + vocab[b], as (bpe_with's new_bytes, in words):
# the tie-break compares those bytes, so a wrong one shows only as a tie broken the wrong way.
NEW_BYTES_READINGS = (("ba", "vocab[b] + vocab[a], the halves swapped"),
                      ("a", "vocab[a] only, the second half left out"), ("b", "vocab[b] only, the first half left out"))
# Texts whose later merges depend on how the earlier ones were counted and made.
REPLAY_TEXTS = (("abab abab aaaa aaaa abcd abcd abc bcd", 264), ("aaab aaab aaab", 258), (PROSE, 300))


def _words(ref, text):
    return [(list(chunk.encode("utf-8")), n) for chunk, n in Counter(ref.pretokenize(text)).items()]


def _replayed(ref, text, merges, merge=merge_pair):
    """The chunks after `merges`, each made with `merge`."""
    words = _words(ref, text)
    for k, pair in enumerate(merges):
        words = [(merge(ids, pair, 256 + k), n) for ids, n in words]
    return words


def _departure(ref, text, merges):
    """(k, the contract's pair, the pairs' counts there) at the first of `merges` that the contract
    would not choose after the ones before it, or None."""
    table = token_bytes([])
    words = _words(ref, text)
    for k, pair in enumerate(merges):
        counts = count_pairs(words)
        want = best_pair(counts, table, "bytes") if counts else None
        if want is None or counts[want] < 2 or pair != want:
            return k, want, counts
        table.append(table[pair[0]] + table[pair[1]])
        words = [(merge_pair(ids, pair, 256 + k), n) for ids, n in words]
    return None


def located_merge(ref, text, vocab_size, got) -> str | None:
    """The step of the first merge of `got` (train_bpe's merges on `text`) that departs, where one
    reading of a step explains it: the new ids, the counting, the replacing, or the tie-break."""
    found = _departure(ref, text, got)
    if found is None:
        return None
    k, want, counts = found
    pair, before = got[k], got[:k]
    table = token_bytes(before)
    if want is None or counts[want] < 2:
        return None  # stopping, which the steps above show
    agree = ("your first merge" if k == 0 else "your first merge agrees with the contract's, then merge 1" if k == 1
             else f"your first {k} merges agree with the contract's, then merge {k}")
    shown_text = f"{text[:40]!r}{'...' if len(text) > 40 else ''}"
    setting = f"train_bpe on {shown_text} (vocab_size {vocab_size}): {agree} is {tuple(pair)}"
    readings = []
    if tuple(x - 1 if x >= 257 else x for x in pair) == want:
        readings.append(("the new ids", f"where the contract merges {tuple(want)}: merge i makes id 256 + i, so the "
                         f"ids so far run to {255 + k}; yours names them one higher"))
    elif any(x >= 256 + k for x in pair):
        made = f"merges 0..{k - 1} made ids 256..{255 + k} only" if k else "no merge has made an id yet"
        readings.append(("the new ids", f"which joins id {max(pair)}, though {made}: merge i makes id 256 + i"))
    words = _replayed(ref, text, before)
    for step, what, counting, fix in COUNT_READINGS:
        other = counting(words)
        if other and best_pair(other, table, "bytes") == pair:
            readings.append((step, f"which is the most frequent pair when {what}; the contract's {tuple(want)} "
                             f"occurs {counts[want]} times, yours {counts[pair]}: {fix}"))
    for step, what, merge, fix in MERGE_READINGS:
        other = count_pairs(_replayed(ref, text, before, merge))
        if other and best_pair(other, table, "bytes") == pair:
            readings.append((step, f"which is the most frequent pair when {what}: {fix}"))
    if not readings and counts.get(pair) == counts[want]:
        made_as = [what for made, what in NEW_BYTES_READINGS  # the tie-break compares the tokens' bytes
                   if [tuple(p) for p in bpe_with(new_bytes=made)(ref, text, vocab_size)] == list(got)]
        if made_as:
            readings.append(("the new token's bytes", f"where the contract merges {tuple(want)}: both occur "
                             f"{counts[want]} times, and every one of your merges is the one chosen when a new "
                             f"token's bytes are {' (or '.join(made_as)}{')' * (len(made_as) - 1)}. The tie-break "
                             "itself may be right, but it compares the tokens' bytes, and yours are made otherwise: "
                             "the new token (a, b) stands for vocab[a] + vocab[b], the first id's bytes then the "
                             "second's"))
    if not readings and counts.get(pair) == counts[want]:
        readings.append(("the tie-break", f"where the contract merges {tuple(want)}: both occur {counts[want]} times, "
                         "and of equally frequent pairs the contract takes the greatest (bytes_a, bytes_b), compared "
                         "as byte strings"))
    if len({step for step, _ in readings}) != 1:
        return None  # none fits, or several do: the checks' messages say what differs
    step = readings[0][0]
    return f"{step}. {setting}, " + "; or ".join(words for _, words in readings)


# ---------------------------------------------------------------- the catalogue

MISCONCEPTIONS = (
    Misconception(
        "pretokenize_str_split", "chunks made with str.split(), which drops the white space",
        "Use GPT-2's pattern: regex.findall(GPT2_PATTERN, text). Joined, the chunks must give the text back, "
        "spaces, tabs and newlines included.",
        {"pretokenize": pretokenize_with("str_split")}),
    Misconception(
        "pretokenize_ascii_letters", "letters and digits matched as [a-zA-Z] and [0-9], ASCII only",
        r"\p{L} is a letter of any script (é, ß, 日) and \p{N} a digit of any kind: use them, with the regex "
        "package (Python's re does not know them).",
        {"pretokenize": pretokenize_with("ascii")}),
    Misconception(
        "pretokenize_ignore_case", "the pattern matched ignoring case, so 'S or 'LL count as contractions",
        "GPT-2's pattern is case-sensitive: only lower-case 's, 't, 're, 've, 'm, 'll, 'd are contractions; leave "
        "out re.IGNORECASE.",
        {"pretokenize": pretokenize_with("case_insensitive")}),
    Misconception(
        "pretokenize_no_trailing_space_rule", r"the pattern without \s+(?!\S), so a run of spaces keeps its last "
        "space instead of giving it to the next word",
        r"Keep \s+(?!\S) before \s+: of the spaces before a word, the last one goes with the word "
        "(\"a  b\" gives [\"a\", \" \", \" b\"]).",
        {"pretokenize": pretokenize_with("no_lookahead")}),
    Misconception(
        "pretokenize_space_apart", "the space before a word (or number, or symbols) made a chunk of its own",
        "Each of the three classes takes one optional space in front, ' ?\\p{L}+': \" world\" is one chunk.",
        {"pretokenize": pretokenize_with("no_leading_space")}),
    Misconception(
        "merges_cross_chunks", "merges counted (or applied) on the whole text's bytes, across the chunks "
        "pretokenize gives",
        "Pretokenize first and count (and merge) pairs inside each chunk only: a pair that spans two chunks, such "
        "as (b'e', b' '), is never merged.",
        {"train_bpe": bpe_with(across=True), "encode": encode_with("across")}),
    Misconception(
        "tie_smallest_pair", "ties between equally frequent pairs broken towards the smallest pair",
        "Among the most frequent pairs take the greatest (bytes_a, bytes_b): max(counts, key=lambda p: "
        "(counts[p], vocab[p[0]], vocab[p[1]])).",
        {"train_bpe": bpe_with(tie="smallest_bytes")}),
    Misconception(
        "tie_by_ids", "ties broken by comparing the ids (id_a, id_b) rather than the byte strings they stand for",
        "Compare (bytes_a, bytes_b): a new token has a large id whatever its bytes, so id order is not byte order "
        "(id 256 = b'th' is greater than id 122 = b'z', but b'th' < b'z').",
        {"train_bpe": bpe_with(tie="ids")}),
    Misconception(
        "tie_first_seen", "ties left to the order the pairs were counted in (max or most_common keep the first)",
        "max(counts, key=counts.get) returns the first of equal counts: break ties explicitly, by the greatest "
        "(bytes_a, bytes_b).",
        {"train_bpe": bpe_with(tie="first_seen")}),
    Misconception(
        "non_overlapping_counts", "pairs counted without overlap, so \"aaa\" holds (a, a) once instead of twice",
        "Count every adjacent pair, zip(ids, ids[1:]): the pairs of \"aaa\" are (a, a) at 0 and at 1. (Only the "
        "merge itself goes left to right without overlap.)",
        {"train_bpe": bpe_with(overlapping=False)}),
    Misconception(
        "distinct_chunks_once", "each distinct chunk counted once, however often it occurs in the text",
        "Weigh a chunk's pairs by how often the chunk occurs: Counter(pretokenize(text)) gives each chunk's count.",
        {"train_bpe": bpe_with(weighted=False)}),
    Misconception(
        "no_early_stop", "merging on when the most frequent pair occurs only once",
        "Stop as soon as no pair occurs twice: a merge of a pair seen once saves nothing.",
        {"train_bpe": bpe_with(early_stop=False)}),
    Misconception(
        "merges_up_to_vocab_size", "vocab_size merges instead of vocab_size - 256",
        "The 256 single bytes are ids 0-255 already: learn vocab_size - 256 merges.",
        {"train_bpe": bpe_with(extra_merges=256)}),
    Misconception(
        "one_merge_too_many", "one merge more than vocab_size allows (a <= where < belongs)",
        "Stop once 256 + len(merges) == vocab_size: the last id is vocab_size - 1.",
        {"train_bpe": bpe_with(extra_merges=1)}),
    Misconception(
        "merge_right_to_left", "a merge applied right to left, so \"aaa\" becomes [a, aa] instead of [aa, a]",
        "Replace the pair scanning left to right, skipping past each replacement: [aa, a].",
        {"train_bpe": bpe_with(right_to_left=True), "encode": encode_with("right_to_left")}),
    Misconception(
        "encode_greedy_left_to_right", "the leftmost learned pair merged first, whatever its rank",
        "Apply the merges in the order they were learned: in each chunk merge the pair whose merge came earliest "
        "(lowest index), everywhere in the chunk, then look again.",
        {"encode": encode_with("greedy_left")}),
    Misconception(
        "encode_longest_match", "the longest known token taken at each position (greedy longest match)",
        "BPE does not look for the longest token: it replays the merges in learned order, which can give a "
        "shorter first token than the longest match.",
        {"encode": encode_with("longest_match")}),
    Misconception(
        "encode_by_frequency", "the learned pair most frequent in the text being encoded merged first",
        "Encoding counts nothing: apply the merges in learned order (lowest index first), exactly as training "
        "made them.",
        {"encode": encode_with("frequency")}),
    Misconception(
        "encode_by_chunk_frequency", "in each chunk, the learned pair most frequent in that chunk merged first",
        "Encoding counts nothing: in each chunk merge the pair whose merge was learned earliest (lowest index), "
        "however often another known pair occurs there, exactly as training made them.",
        {"encode": encode_with("chunk_frequency")}),
    Misconception(
        "encode_last_merge_first", "the latest-learned merge present applied first",
        "The earliest-learned merge goes first: min over the chunk's pairs of their merge index.",
        {"encode": encode_with("last_merge_first")}),
    Misconception(
        "decode_each_token_separately", "each token decoded to text on its own, then the texts joined",
        "Join the bytes of all the ids first, then decode once: a token can hold half a character, and only "
        "the joined bytes decode to it.",
        {"decode": decode_with("separately")}),
    Misconception(
        "decode_errors_ignore", "bytes that are not valid UTF-8 dropped (errors=\"ignore\")",
        "Decode with errors=\"replace\": half a character becomes U+FFFD, which shows that something was cut.",
        {"decode": decode_with("ignore")}),
    Misconception(
        "decode_strict", "bytes decoded strictly, so half a character raises UnicodeDecodeError",
        "Decode with errors=\"replace\": a slice of ids can cut a character in half.",
        {"decode": decode_with("strict")}),
    Misconception(
        "decode_latin1", "each byte read as one character (latin-1, or chr of each byte) instead of UTF-8",
        "Join the bytes and decode them as UTF-8: é is two bytes, 日 three, 🙂 four.",
        {"decode": decode_with("latin1")}),
)


# ---------------------------------------------------------------- the checks

# Training text for decode: two-byte characters that share a first byte (0xC3), so the merges
# join a space with half a character before they join the characters' own bytes.
SPLIT_TRAIN = "é à ñ ü ö ç è ê ô é à ñ ü ö ç"
ODD = ("e\u0301 (combining accent), 👩‍👩‍👧 (a family), 🇫🇷, \u200b(zero width) \ufeffBOM, \x00NUL, \r\n"
       "مرحبا, עברית, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢, \U0010fffd, \ufffd itself.")

SAMPLE_BUG = SampleBug("train_bpe", "self.key = (self.count, token_bytes[pair[0]], token_bytes[pair[1]])",
                       "self.key = (self.count, pair[0], pair[1])", "tie_by_ids")


PARTS = graded_parts()
