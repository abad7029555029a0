"""Unit 08, tokens and the training recipe (PyTorch): the hidden checks and the misconception catalogue.

The reference is the solution notebook (`solutions/08_training/training.ipynb`). The unit has two
halves, each in a module of its own: the byte-level BPE tokenizer (`training_tokenizer.py`:
`pretokenize`, `train_bpe`, `encode`, `decode`) and the recipe that trains a model well
(`training_recipe.py`: `cross_entropy`, `lr_at`, `clip_grad_norm`, `evaluate`,
`save_checkpoint`, `load_checkpoint`, `train_loop`). This module puts them together.
"""

from __future__ import annotations

from ..core import Unit
from . import training_recipe, training_tokenizer

UNIT_NAME = "08_training"

UNIT = Unit(
    UNIT_NAME,
    parts=training_tokenizer.PARTS + training_recipe.PARTS,
    misconceptions=training_tokenizer.MISCONCEPTIONS + training_recipe.MISCONCEPTIONS,
    sample_bug=training_tokenizer.SAMPLE_BUG,
    cell_seconds=training_recipe.CELL_SECONDS,
    worker_imports=training_recipe.WORKER_IMPORTS,
)
