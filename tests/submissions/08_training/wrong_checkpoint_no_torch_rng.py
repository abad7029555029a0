"""Torch's generator state left out of the checkpoint (or not restored). Only what the graded part runs
is here: a mistake is graded on its own part."""

import random

import numpy as np
import torch


# Python's and NumPy's generators are saved, torch's is forgotten.
def save_checkpoint(path, model, optimizer, step, **state):
    """Write everything a run needs to go on from here: weights, optimizer, step, state, RNG states."""
    rng = {"python": random.getstate(), "numpy": np.random.get_state()}
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "state": state, "rng": rng}, path)


def load_checkpoint(path, model, optimizer):
    """Restore what save_checkpoint wrote, RNG states included; return (step, state)."""
    # weights_only=False: the RNG states are Python and NumPy objects; only load files you wrote.
    checkpoint = torch.load(path, weights_only=False)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    rng = checkpoint["rng"]
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    return checkpoint["step"], checkpoint["state"]
