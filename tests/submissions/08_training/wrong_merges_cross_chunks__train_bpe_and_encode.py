"""Training and encoding on the whole text's bytes, never split into chunks: pairs such as (b'e', b' ')
get merged. Only what the graded part runs is here: a mistake is graded on its own part."""

def replace_pair(ids, a, b, new_id):
    # one pass, left to right, skipping past each replacement ("aaa" -> [aa, a])
    result, i = [], 0
    while i < len(ids):
        if ids[i] == a and i + 1 < len(ids) and ids[i + 1] == b:
            result.append(new_id)
            i += 2
        else:
            result.append(ids[i])
            i += 1
    return result


def train_bpe(text, vocab_size):
    # Every chunk of the text, repeats included, recounted from scratch after each merge.
    chunks = [list(text.encode("utf-8"))]
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    while 256 + len(merges) < vocab_size:
        counts = {}
        for ids in chunks:
            for a, b in zip(ids, ids[1:], strict=False):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        top = max(counts.values())
        if top < 2:
            break
        tied = [p for p, n in counts.items() if n == top]
        tied.sort(key=lambda p: (vocab[p[0]], vocab[p[1]]), reverse=True)
        a, b = tied[0]
        new_id = 256 + len(merges)
        merges.append((a, b))
        vocab[new_id] = vocab[a] + vocab[b]
        chunks = [replace_pair(ids, a, b, new_id) for ids in chunks]
    return merges


def encode(text, merges):
    # Each merge in learned order over every chunk: the same as always taking the earliest-learned
    # pair present, since a merge can only create pairs learned after it.
    chunks = [list(text.encode("utf-8"))]
    for n, (a, b) in enumerate(merges):
        chunks = [replace_pair(ids, a, b, 256 + n) if len(ids) > 1 else ids for ids in chunks]
    return [i for ids in chunks for i in ids]
