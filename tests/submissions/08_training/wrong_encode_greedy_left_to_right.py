"""encode merges the leftmost pair that is a learned merge, whatever its rank. Only what the graded
part runs is here: a mistake is graded on its own part."""

import regex

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def pretokenize(text):
    return [m.group() for m in PATTERN.finditer(text)]


def encode(text, merges):
    # Each merge in learned order over every chunk: the same as always taking the earliest-learned
    # pair present, since a merge can only create pairs learned after it.
    rank = {tuple(pair): n for n, pair in enumerate(merges)}
    out = []
    for chunk in pretokenize(text):
        ids = list(chunk.encode("utf-8"))
        i = 0
        while i + 1 < len(ids):
            if (ids[i], ids[i + 1]) in rank:
                ids[i:i + 2] = [256 + rank[ids[i], ids[i + 1]]]
                i = 0  # start again from the left
            else:
                i += 1
        out += ids
    return out
