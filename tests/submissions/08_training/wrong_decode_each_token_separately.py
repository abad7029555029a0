"""decode turns each token into text on its own: a character split across two tokens becomes two
U+FFFD. Only what the graded part runs is here: a mistake is graded on its own part."""

def decode(ids, merges):
    vocab = [bytes([i]) for i in range(256)]
    for a, b in merges:
        vocab.append(vocab[a] + vocab[b])
    return "".join(vocab[i].decode("utf-8", errors="replace") for i in ids)
