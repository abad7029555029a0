"""Unit 08, tokens and the training recipe (PyTorch): the hidden checks and the misconception catalogue.

The reference is the solution notebook (`solutions/08_training/training.ipynb`). The unit has three
pieces, each in a module of its own: the byte-level BPE tokenizer (`training_tokenizer.py`:
`pretokenize`, `train_bpe`, `encode`, `decode`), the recipe's functions (`training_recipe.py`:
`cross_entropy`, `lr_at`, `clip_grad_norm`, `evaluate`) and the runs they make
(`training_runs.py`: `save_checkpoint`, `load_checkpoint`, `train_loop`). This module puts
them together.
"""

from __future__ import annotations

from ..engine.spec import OPTIMIZER_IMPORTS, Unit
from . import training_recipe, training_runs, training_tokenizer

UNIT_NAME = "08_training"

UNIT = Unit(
    UNIT_NAME,
    # The slowest cell of the solution notebook (train_loop's visible checks, three short runs)
    # computes for about 3 s on a laptop CPU; the demo is skipped while grading.
    cell_seconds=15,
    reference_cpu_seconds=2.5,  # 2.29 s measured (spec.Unit.reference_cpu_seconds)
    notebook_cpu_seconds=6,  # 5.69 s measured (spec.Unit.notebook_cpu_seconds)
    parts=training_tokenizer.PARTS + training_recipe.PARTS + training_runs.PARTS,
    misconceptions=training_tokenizer.MISCONCEPTIONS + training_recipe.MISCONCEPTIONS + training_runs.MISCONCEPTIONS,
    sample_bug=training_tokenizer.SAMPLE_BUG,
    worker_imports=training_runs.WORKER_IMPORTS,
    grader_imports=OPTIMIZER_IMPORTS,  # the reference's runs, on the grader's side
)
