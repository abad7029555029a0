"""Unit 04 (the transformer block): the checks specific to this unit's grader.

`TransformerBlock` is graded with correct sub-parts in place of the student's own (the
`library_stubs` of its part, imported inside the worker), so a bug in attention, the
feed-forward layer or a norm costs that part's points and not the block's as well. The
stand-ins must not open a way around the from-scratch rule. (The exercise's table of parts is
held to the grader's points by tests/test_release.py, for every unit.)
"""

from __future__ import annotations

import pytest
import torch

from autograder.engine.catalogue import variant_namespace
from autograder.engine.grade import grade_part
from autograder.engine.reference import load_reference
from autograder.paths import ROOT
from autograder.trust.student import InProcessStudent, Student
from autograder.units import UNITS
from autograder.units import block as block_unit
from coursekit import blocks

UNIT = UNITS["04_block"]
SUBMISSIONS = ROOT / "tests" / "submissions" / "04_block"


def graded_in_worker(path_or_source, parts) -> list:
    """Grade `parts` of a submission in a sandboxed worker, as real grading does."""
    if isinstance(path_or_source, str):
        student = Student([("answer", path_or_source)])
        student.start()
    else:
        student = Student.open(path_or_source)
    try:
        return [r for part in parts for r in grade_part(UNIT, part, student)]
    finally:
        student.close()


def points(results, part: str) -> tuple[float, float]:
    mine = [r for r in results if r.name.split("/")[0] == part]
    return sum(r.points for r in mine), sum(r.max_points for r in mine)


@pytest.mark.parametrize(("file", "buggy_part"), [
    ("wrong_attention_not_causal.py", "MultiHeadAttention"),
    ("wrong_ffn_gelu_after_fc2.py", "FeedForward"),
    # its block's LayerNorm modules call the student's own (wrong) layer_norm
    ("wrong_ln_eps_outside_sqrt.py", "layer_norm"),
])
def test_a_bug_in_a_sub_part_costs_that_part_only_not_the_block(file, buggy_part):
    results = graded_in_worker(SUBMISSIONS / file, [buggy_part, "TransformerBlock"])
    got, most = points(results, buggy_part)
    assert got < most, f"{file}: its bug in {buggy_part} should cost points there"
    got, most = points(results, "TransformerBlock")
    assert got == most, [r.message for r in results if not r.passed and r.name.startswith("TransformerBlock")]


def test_a_block_failure_names_every_stand_in_it_was_given():
    part = UNIT.part("TransformerBlock")
    mistake = next(m for m in UNIT.misconceptions if m.name == "block_post_norm")
    namespace = variant_namespace(part, load_reference(UNIT.name), mistake.variants[part.name])
    failed = [r for r in grade_part(UNIT, part.name, InProcessStudent(namespace)) if not r.passed]
    names = [f"`{name}`" for name, _ in sorted(part.library_stubs)]
    listed = ", ".join(names[:-1]) + " and " + names[-1]
    assert failed and all(f"the {listed} it calls were the reference's, not yours" in r.message for r in failed)
    assert {name for name, _ in part.library_stubs} == {"MultiHeadAttention", "FeedForward", "layer_norm",
                                                         "rms_norm", "gelu"}


def test_the_stand_ins_compute_what_the_reference_does():
    ref = load_reference(UNIT.name)
    torch.manual_seed(3)
    x, weight, bias = torch.randn(2, 5, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64), torch.randn(
        8, dtype=torch.float64)
    assert torch.allclose(blocks.layer_norm(x, weight, bias), ref.layer_norm(x, weight, bias), atol=1e-12)
    assert torch.allclose(blocks.layer_norm(x, weight, bias, eps=0.5), ref.layer_norm(x, weight, bias, eps=0.5))
    assert torch.allclose(blocks.rms_norm(x, weight), ref.rms_norm(x, weight), atol=1e-12)
    assert torch.allclose(blocks.rms_norm(x, weight, eps=0.5), ref.rms_norm(x, weight, eps=0.5))
    for stand_in, name in ((blocks.CausalSelfAttention(8, 2), "MultiHeadAttention"),
                           (blocks.FeedForward(8, 12), "FeedForward")):
        mine = getattr(ref, name)(*((8, 2) if name == "MultiHeadAttention" else (8, 12))).double()
        stand_in.double().load_state_dict(mine.state_dict())
        assert torch.allclose(stand_in(x), mine(x), atol=1e-12), name


IMPORTED_NORMS = """
from coursekit.blocks import layer_norm, rms_norm
"""


def test_the_course_norms_do_not_get_round_the_from_scratch_rule():
    """coursekit.blocks.layer_norm calls F.layer_norm: imported as the student's own, it raises
    while layer_norm is graded, like F.layer_norm itself (and likewise rms_norm)."""
    source = (SUBMISSIONS / "correct_einsum.py").read_text() + IMPORTED_NORMS
    results = graded_in_worker(source, ["layer_norm", "rms_norm"])
    assert results and not any(r.passed for r in results), [r.message for r in results if r.passed]
    assert all("off limits" in r.message for r in results if r.name.split("/")[1] != "inputs_unchanged")


def test_a_sub_part_mistake_is_not_catalogued_for_the_block():
    """The block is graded with correct sub-parts: a variant of TransformerBlock that carries a
    sub-part's bug would describe nothing a student can lose block points for."""
    for mistake in block_unit.MISCONCEPTIONS:
        if "TransformerBlock" in mistake.variants:
            assert set(mistake.variants) == {"TransformerBlock"}, mistake.name


@pytest.mark.parametrize("name", ["FeedForward", "TransformerBlock"])
def test_the_courses_own_block_imported_into_the_answer_earns_nothing(name):
    # coursekit.blocks must stay in unit 04's sandbox (the block's stand-ins run from it), so its
    # ready-made FeedForward and TransformerBlock, complete answers to two parts, are refused by
    # the submission's text. (A pasted copy is not: these classes are a few canonical lines, and
    # the reference solution's own block matches coursekit's almost token for token.)
    source = (SUBMISSIONS / "correct_einsum.py").read_text()
    source = source.replace(f"class {name}(nn.Module):", f"from coursekit.blocks import {name}  # noqa: E402\n\n\n"
                            f"class Unused{name}(nn.Module):")
    imported = graded_in_worker(source, [name])
    assert points(imported, name)[0] == 0 and "imports the course's `coursekit.blocks`" in imported[0].message
