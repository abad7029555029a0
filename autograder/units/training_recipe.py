"""Unit 08, the recipe's functions (`cross_entropy`, `lr_at`, `clip_grad_norm`, `evaluate`): hidden
checks and misconceptions.

- `cross_entropy` is compared with an oracle written here in float64 (log-sum-exp over every
  row), on 2-D, 3-D and single-position logits, on logits of +-1e4 (finite, and right), and
  through `backward()`: the gradient it leaves on the logits is (softmax - one-hot) / N.
- `lr_at` is called step by step over schedules whose corners matter (no warm-up, a run a few
  steps long, a warm-up that ends at the last step, the steps around `warmup_steps` and
  `total_steps - 1`, and after the run) and compared with the reference.
- `clip_grad_norm` is handed `model.parameters()` (a generator) of the course's GPT, built in
  the worker, whose gradients a backward pass there made. The grader reads those gradients
  before and after the call, as data, and judges the call against its own float64 arithmetic
  on them: one factor for every tensor, `min(1, max_norm / (total_norm + 1e-6))`, the norm
  returned as it was before, parameters without a gradient left without one, weights untouched.
- `evaluate` is handed the course's GPT whose layers run in the grader (`api.remote_model`), so
  the value it returns is compared with the grader's own float64 measurement of the same
  weights on the same windows, and the grader sees each layer's mode (training or eval) on
  every call, during the evaluation and on a forward pass after it. Whether gradients were
  kept is seen from outside the student's process, on a deep remote model whose layers are
  also linked into the worker's autograd graph as a real model's are (`remote_model(autograd=
  True)`, for this check only): the grader's record of every layer call's input shape must
  show forward passes of `min(batch_size, windows left)` windows, every layer run once per
  batch (an evaluation that keeps the graph but runs a few windows at a time, whatever
  batch_size says, frees it before it shows), and then the worker's peak memory during the
  evaluation (`memory_call`, from /proc) must be a fraction of what an autograd graph of that
  forward pass holds. Trusted code (the reference, a catalogued variant) shows its batches by
  hooks, and its grad mode from inside, by the mode its forward pass ran in.
"""

from __future__ import annotations

import math
import types

import numpy as np
import torch

from ..engine.compare import Tolerance, compare_arrays, describe
from ..engine.probes import ProbeFailed
from ..engine.spec import Check, Inputs, Misconception, Part, diagnose_facet, facet, facet_oracle

MODEL = "coursekit.gpt.GPT"
F32 = Tolerance(rtol=1e-5, atol=1e-5)  # a mean of float32 losses of a few nats
LR = Tolerance(rtol=1e-9, atol=1e-15)  # float arithmetic of the same formula, done in another order at most
LOSS = Tolerance(rtol=1e-4, atol=1e-5)  # float32 layers against the grader's float64 measurement

# While cross_entropy is graded: the library's losses and every log_softmax raise (the contract);
# nll_loss stays, since with a log-softmax of one's own it is only a gather and a mean.
CE_FORBID = (
    "torch.nn.functional.cross_entropy", "torch.nn.CrossEntropyLoss",
    "torch.nn.functional.log_softmax", "torch.log_softmax", "torch.Tensor.log_softmax",
    "torch.special.log_softmax", "torch.nn.LogSoftmax",
)
# clip_grad_norm_ and its deprecated alias, under both of their modules, and the two halves
# torch 2.6+ split it into.
CLIP_FORBID = tuple(
    f"{module}.{name}"
    for module in ("torch.nn.utils", "torch.nn.utils.clip_grad")
    for name in ("clip_grad_norm_", "clip_grad_norm", "get_total_norm", "clip_grads_with_norm_")
)


def number(value) -> float | None:
    """A returned scalar (int, float, a one-element tensor or array) as a float; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, torch.Tensor | np.ndarray | np.generic) and np.asarray(value).size == 1:
        try:
            return float(np.asarray(value.detach() if isinstance(value, torch.Tensor) else value).reshape(()))
        except (TypeError, ValueError):
            return None
    return None


# ---------------------------------------------------------------- what is graded


def graded_parts() -> tuple[Part, ...]:
    """The graded parts: each check, what it shows, and its points. What the checks use (their
    inputs, diagnoses and probes) and the catalogue of mistakes they name are below; this is
    called at the end of the module, once all of it is defined."""
    CE_CHECKS = (
        Check("rows", "logits (12, 7), targets (12,)", 0.75, logits_inputs((12, 7)), tol=F32, oracle=ce_oracle),
        Check("batched", "logits (3, 5, 11), targets (3, 5): the mean over all 15 positions", 0.5,
              logits_inputs((3, 5, 11)), tol=F32, oracle=ce_oracle),
        Check("one_position", "one position: logits (9,), a 0-d target", 0.25, logits_inputs((9,)), tol=F32,
              oracle=ce_oracle),
        Check("huge_logits", "logits of +-1e4 among others of about 30: finite, and right", 1,
              logits_inputs((6, 10), scale=30.0, huge=True), tol=Tolerance(rtol=1e-5, atol=1e-3), oracle=ce_oracle),
        Check("gradient", "backward() through the loss gives (softmax - one_hot) / N on logits (2, 4, 6)", 1,
              logits_inputs((2, 4, 6)), tol=F32, probe=ce_grad_probe, oracle=ce_grad_oracle),
        Check("inputs_unchanged", "logits and targets are not modified", 0.5, logits_inputs((4, 5)), kind="unchanged"),
    )

    # lr_at takes five numbers and returns one: there are no inputs it could modify, so it has no
    # "inputs unchanged" check (one that cannot fail).
    LR_CHECKS = (
        Check("warmup_and_cosine", "max_lr 6e-4, 10 warm-up steps, 100 steps, min_lr 6e-5: steps 0 to 150", 1,
              schedule_inputs(6e-4, 10, 100, 6e-5, [0, 1, 5, 8, 9, 10, 11, 30, 54, 55, 97, 98, 99, 100, 150]), tol=LR,
              probe=schedule_probe),
        Check("no_warmup", "warmup_steps 0 (the decay starts at max_lr at step 0), min_lr 0", 0.5,
              schedule_inputs(1.0, 0, 12, 0.0, range(0, 15)), tol=LR, probe=schedule_probe),
        Check("short_run", "5 steps, 2 of them warm-up, min_lr 0.1", 0.5,
              schedule_inputs(2.0, 2, 5, 0.1, range(0, 8)), tol=LR, probe=schedule_probe),
        # Step 6 of this schedule is both warmup_steps and total_steps - 1: the contract puts max_lr and
        # min_lr there at once, so it is not asked.
        Check("warmup_to_the_end", "a warm-up of 6 steps in a run of 7, min_lr 0.05: the warm-up, then min_lr after",
              0.5, schedule_inputs(0.3, 6, 7, 0.05, [0, 1, 2, 3, 4, 5, 7, 8, 30]), tol=LR, probe=schedule_probe),
        Check("corners", "the exact rates at warmup_steps - 1 and warmup_steps (max_lr), total_steps - 1 and after "
              "(min_lr), 3 warm-up steps of 40", 0.5,
              schedule_inputs(1e-3, 3, 40, 1e-4, [2, 3, 38, 39, 40, 41, 1000]), tol=LR, probe=schedule_probe),
    )

    CLIP_CHECKS = (
        Check("global", "gradients with a global norm 3 times max_norm, passed as model.parameters() (a generator): "
              "every one scaled by the same factor", 0.75, clip_inputs(1 / 3), probe=clip_probe, oracle=facet_oracle),
        # A function that never touches .grad leaves the tensors where they were too: this counts with the clipping.
        Check("in_place", "the same call scales the gradient tensors themselves (p.grad stays the tensor it was)", 0.25,
              clip_inputs(1 / 3, facet_name="in_place"), probe=clip_probe, oracle=facet_oracle, requires=("global",),
              requires_why="a function that never touches the gradients leaves each .grad the tensor it was too"),
        Check("returns_norm", "the same call returns the total norm before clipping", 0.5,
              clip_inputs(0.4, facet_name="norm"), probe=clip_probe, oracle=facet_oracle),
        # A function that does nothing leaves small gradients alone too: this counts with the clipping.
        Check("below_max_norm", "a global norm half of max_norm: nothing changes", 0.5, clip_inputs(2.0),
              probe=clip_probe, oracle=facet_oracle, requires=("global",),
              requires_why="a function that never touches the gradients leaves them alone here too; only "
                           "beside clipping that works does leaving small gradients alone show anything"),
        Check("skips_missing_grads", "the attention's parameters frozen (.grad None): skipped, the rest clipped "
              "together", 0.5, clip_inputs(0.25, frozen="blocks.0.attn"), probe=clip_probe, oracle=facet_oracle),
        # One parameter with a gradient: clipping each tensor by its own norm is then right too, and
        # a mistake named elsewhere is not charged again here.
        Check("float64_tiny_norm", f"a float64 model with one gradient, `{TINY_ONLY}`, whose norm is {TINY_NORM:g}: "
              "there the + 1e-6 counts", 0.25, clip_inputs(0.5, dtype="float64", norm=TINY_NORM, only=TINY_ONLY),
              probe=clip_probe, oracle=facet_oracle),
        Check("inputs_unchanged", "the parameters themselves are not modified (only their gradients)", 0.25,
              clip_inputs(0.2, facet_name="weights"), probe=clip_probe, oracle=facet_oracle, kind="unchanged"),
    )

    EVAL_CHECKS = (
        Check("ragged", "93 ids, C = 8 (11 whole windows; the 5 ids left over make none), batches of 4 (4, 4, 3)", 1,
              eval_inputs(93, 4), tol=LOSS, probe=eval_value_probe, oracle=eval_oracle),
        Check("multiple_of_c", "48 ids, C = 8: 5 whole windows (the sixth would need a 49th id), batches of 2", 0.5,
              eval_inputs(48, 2, mode="eval"), tol=LOSS, probe=eval_value_probe, oracle=eval_oracle),
        Check("one_batch", "49 ids, C = 8: 6 windows, batch_size 10 (one batch)", 0.5, eval_inputs(49, 10), tol=LOSS,
              probe=eval_value_probe, oracle=eval_oracle),
        Check("eval_mode", "every layer call of the forward passes runs in eval mode (the model is handed in training "
              "mode)", 0.5, eval_inputs(41, 2, facet_name="during"), probe=eval_mode_probe, oracle=facet_oracle),
        Check("restores_mode", "the model is back in its mode after: training stays training, eval stays eval", 0.5,
              eval_inputs(41, 3, facet_name="restores"), probe=eval_mode_probe, oracle=facet_oracle),
        Check("no_gradients", "no autograd graph is kept (a model of 16 blocks, 256 windows of 4 ids in one batch: "
              "the memory your process adds, measured from outside it, is far below what a graph of that forward pass "
              "takes)", 0.5,
              grad_inputs(), probe=no_grad_probe, oracle=facet_oracle),
        Check("inputs_unchanged", "the model's weights are unchanged and hold no gradient after the call", 0.5,
              eval_inputs(33, 2), probe=unchanged_probe, oracle=facet_oracle, kind="unchanged"),
    )

    return (
        Part("cross_entropy", checks=CE_CHECKS, diagnose=diagnose_ce, forbid=CE_FORBID, locate=locate_ce),
        Part("lr_at", checks=LR_CHECKS, diagnose=diagnose_lr, locate=locate_lr),
        Part("clip_grad_norm", checks=CLIP_CHECKS, diagnose=lambda r, e, i, t: diagnose_facet(r, e, "the clipping"),
             forbid=CLIP_FORBID),
        # evaluate calls the contract's cross_entropy: the reference's while evaluate is graded
        # CPU seconds for one call: an evaluation over overlapping windows (stride 1) of the no_gradients check's
        # model runs 4 forward passes of it, about 2.5 s of the worker's (the grader computes its layers)
        Part("evaluate", checks=EVAL_CHECKS, diagnose=diagnose_eval, uses=("cross_entropy",), seconds=10.0,
             locate_probe=locate_evaluate),
    )


# ---------------------------------------------------------------- cross_entropy


def logits_inputs(shape, scale=3.0, huge=False):
    """Logits (..., V) drawn from the check's seed, and targets (...) in range(V)."""

    def make(rng):
        logits = torch.from_numpy(rng.normal(size=shape) * scale).float()
        targets = torch.from_numpy(rng.integers(0, shape[-1], shape[:-1])).long()
        if huge:
            rows = logits.view(-1, shape[-1])
            flat = targets.view(-1)
            rows[0, flat[0]] = 1e4  # the right token far ahead: a loss of about 0
            rows[1, (flat[1] + 1) % shape[-1]] = 1e4  # a wrong token far ahead: a loss of about 1e4
            rows[2] = -1e4  # every logit hugely negative: exp underflows to 0 without the shift
            rows[2, flat[2]] = -1e4 + 2.0
            rows[3, flat[3]] = -1e4  # the right token far behind
        return Inputs((logits, targets))

    return make


def ce_oracle(inputs: Inputs):
    """The mean of logsumexp(z) - z_t over every position, in float64."""
    logits, targets = inputs.args
    z = logits.double().reshape(-1, logits.shape[-1])
    m = z.max(dim=1, keepdim=True).values
    lse = m.squeeze(1) + torch.log(torch.exp(z - m).sum(dim=1))
    return (lse - z.gather(1, targets.reshape(-1, 1)).squeeze(1)).mean()


def ce_grad_probe(api, inputs: Inputs):
    """(the loss, the gradient backward() leaves on the logits)."""
    logits, targets = inputs.args
    logits = logits.detach().clone().requires_grad_(True)
    loss, grads = api.call("cross_entropy", logits, targets, backward=torch.tensor(1.0))
    grad = grads[0] if isinstance(grads, list | tuple) and grads else None
    return {"loss": loss.detach() if isinstance(loss, torch.Tensor) else loss, "grad": grad}


def ce_grad_oracle(inputs: Inputs):
    """d mean(loss) / d logits = (softmax(z) - one_hot(t)) / N, in float64."""
    logits, targets = inputs.args
    z = logits.double().reshape(-1, logits.shape[-1])
    grad = torch.softmax(z, dim=1)
    grad[torch.arange(z.shape[0]), targets.reshape(-1)] -= 1.0
    return {"loss": ce_oracle(inputs), "grad": (grad / z.shape[0]).reshape(logits.shape).float()}


def diagnose_ce(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    if isinstance(expected, dict):  # the gradient check: (loss, gradient)
        if not isinstance(result, dict):
            return f"could not follow the call ({describe(result)})"
        problem = diagnose_ce(result.get("loss"), expected["loss"], inputs, tol)
        if problem is not None:
            return problem
        grad = result.get("grad")
        if not isinstance(grad, torch.Tensor):
            return ("backward() through the loss left no gradient on the logits: the loss must be computed from "
                    "the logits with torch operations (no .item(), no NumPy, no detach) so autograd can follow it")
        problem = compare_arrays(grad, expected["grad"], Tolerance(rtol=1e-4, atol=1e-7), "the gradient on the logits")
        return None if problem is None else (f"{problem}. The gradient of the mean loss is (softmax(z) - one_hot(t)) "
                                             "/ N, N the number of positions")
    if not isinstance(result, torch.Tensor):
        return (f"returned {describe(result)}, expected a 0-dimensional tensor (return the torch mean itself, not "
                ".item(), so that backward() works)")
    if result.numel() != 1 or result.dim() != 0:
        return (f"returned a tensor of shape {tuple(result.shape)}, expected one number, a 0-dimensional tensor: "
                "the mean over every position")
    if not result.is_floating_point():
        return f"returned a tensor of dtype {result.dtype}, expected a floating-point loss"
    got, want = float(result), float(expected)
    if not math.isfinite(got):
        if not math.isfinite(want):  # a catalogued mistake's own overflow: the same answer
            return None
        return (f"the loss is {got} where {want:.6g} was expected: exp of a large logit overflows (or all of a "
                "row's exps underflow to 0). Subtract the row's maximum before exp, and add it back after the log")
    if math.isclose(got, -want, rel_tol=1e-4, abs_tol=1e-5) and abs(want) > 1e-3:
        return (f"returned {got:.6g}, expected {want:.6g}: the negative log-likelihood is logsumexp(z) - z_t, "
                "not z_t - logsumexp(z)")
    return compare_arrays(result, expected, tol, "the loss")


def ce_with(shift=True, add_back=True, reduce="mean", sign=1.0, every_row=False):
    """reduce: "mean" (right), "sum", or "first" (a sum divided by the logits' first dimension)."""

    def variant(reference, logits, targets):
        z = logits.reshape(-1, logits.shape[-1]).float()
        t = targets.reshape(-1)
        m = z.max(dim=1, keepdim=True).values if shift else torch.zeros_like(z[:, :1])
        lse = torch.log(torch.exp(z - m).sum(dim=1)) + (m.squeeze(1) if add_back else 0.0)
        logprobs = z - lse.unsqueeze(1)
        picked = logprobs[:, t] if every_row else logprobs.gather(1, t.unsqueeze(1)).squeeze(1)
        losses = -sign * picked
        if reduce == "sum":
            return losses.sum()
        if reduce == "first":
            return losses.sum() / logits.shape[0]
        return losses.mean()

    return variant


def _loss(value) -> float | None:
    """A one-number result as a float (None: not one number)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def locate_ce(call) -> str | None:
    """Probabilities in known ratios: row [ln 1, ln 2, ln 3] is softmax [1/6, 2/6, 3/6]."""
    logits = torch.log(torch.tensor([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0]], dtype=torch.float64))
    targets = torch.tensor([2, 0])  # each row's own likeliest token: both positions lose -ln 3/6
    want = -math.log(3 / 6)
    every_row = sum(-math.log(p / 6) for p in (3, 1, 2, 3)) / 4  # logprobs[:, targets]: every target, every row
    value = call(logits.clone(), targets.clone())
    got = _loss(value)
    setting = "Rows [ln 1, ln 2, ln 3] and [ln 3, ln 1, ln 2] (probabilities in sixths) with targets [2, 0]"
    if got is None:
        return (f"the reduction. On logits (2, 3) with targets (2,) the loss is one number, the mean over both "
                f"positions; yours is {describe(value)}")
    if abs(got - want) > 1e-6:
        for wrong, step, fix in (
                (-want, "the sign", "the loss is the negative log-likelihood, -log p(target)"),
                (2 * want, "the reduction", "average the positions' losses, do not sum them"),
                (want - math.log(3), "the log-sum-exp", "the row maximum subtracted before exp must be added back "
                 "to the log: lse = m + log(sum(exp(z - m)))"),
                (every_row, "the targets", "each position's loss is the log-probability of its own target: "
                 "logprobs.gather(-1, targets[..., None]), not logprobs[:, targets] (every target for every row)")):
            if abs(got - wrong) < 1e-6:
                return f"{step}. {setting} lose -ln 3/6 each: the loss is {want:.4f}; yours is {got:.4f}: {fix}"
        return f"the log-likelihood. {setting} lose -ln 3/6 each: the loss is {want:.4f}; yours is {got:.4f}"
    volume = torch.log(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)).repeat(2, 3, 1)  # (2, 3, 3)
    value = call(volume.clone(), torch.tensor([[2, 0, 1], [1, 1, 2]]))
    want3 = float(sum(-math.log(p / 6) for p in (3, 1, 2, 2, 2, 3)) / 6)
    if _loss(value) is None or abs(_loss(value) - want3) > 1e-6:
        told = describe(value) if _loss(value) is None else f"{_loss(value):.4f}"
        return (f"the positions. With logits (2, 3, V) and targets (2, 3) every one of the 6 positions counts once: "
                f"the mean over all of them is {want3:.4f}; yours is {told}: flatten (logits.reshape(-1, V), "
                "targets.reshape(-1)) or average over every axis but the last")
    got = _loss(call(logits + 1000.0, targets.clone()))
    if got is None or not math.isfinite(got) or abs(got - want) > 1e-3:
        told = "not a finite number" if got is None or not math.isfinite(got) else f"{got:.4f}"
        return (f"the log-sum-exp. Adding 1000 to every logit changes no probability, so the loss stays {want:.4f}; "
                f"yours becomes {told}: subtract each row's maximum before exp, then add it back to the log "
                "(torch.logsumexp does both)")
    return None


# ---------------------------------------------------------------- lr_at


def schedule_inputs(max_lr, warmup_steps, total_steps, min_lr, steps):
    def make(rng):
        return Inputs((), {"schedule": (max_lr, warmup_steps, total_steps, min_lr), "steps": list(steps)})

    return make


def schedule_probe(api, inputs: Inputs):
    """lr_at at each of the check's steps."""
    max_lr, warmup_steps, total_steps, min_lr = inputs.kwargs["schedule"]
    return {"steps": inputs.kwargs["steps"], "schedule": list(inputs.kwargs["schedule"]),
            "rates": [api.call("lr_at", step, max_lr, warmup_steps, total_steps, min_lr)
                      for step in inputs.kwargs["steps"]]}


def diagnose_lr(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    if not isinstance(result, dict) or "rates" not in result:
        return f"could not follow the calls ({describe(result)})"
    max_lr, warmup, total, min_lr = expected["schedule"]
    for step, got, want in zip(expected["steps"], result["rates"], expected["rates"], strict=True):
        value = number(got)
        if value is None:
            return f"lr_at({step}, ...) returned {describe(got)}, expected a float"
        want = float(want)
        if math.isclose(value, want, rel_tol=tol.rtol, abs_tol=tol.atol):
            continue
        if step < warmup:
            phase = f"in the warm-up (max_lr * (step + 1) / warmup_steps = {want:.6g})"
        elif step < total - 1:
            phase = (f"in the cosine decay (p = (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps); "
                     f"expected {want:.6g})")
        else:
            phase = f"at total_steps - 1 = {total - 1} or after, where the rate is min_lr = {min_lr:g}"
        return (f"with max_lr={max_lr:g}, warmup_steps={warmup}, total_steps={total}, min_lr={min_lr:g}: "
                f"lr_at({step}) returned {value:.6g}, {phase}")
    return None


def lr_with(warmup="right", denominator="right", floor=True, after="min"):
    """warmup: "right", "from_zero" (step / warmup_steps) or "plus_one" ((step + 1) / (warmup_steps + 1));
    denominator: "right" or "total" (total_steps - warmup_steps); floor: False decays to 0;
    after: "min" (right) or "cosine" (the cosine goes on past total_steps - 1)."""

    def variant(reference, step, max_lr, warmup_steps, total_steps, min_lr):
        if step < warmup_steps:
            return {"right": max_lr * (step + 1) / warmup_steps, "from_zero": max_lr * step / warmup_steps,
                    "plus_one": max_lr * (step + 1) / (warmup_steps + 1)}[warmup]
        # min_lr from the last step on; a decay over total_steps - warmup_steps steps (nanoGPT's) switches to it
        # only after the last step
        last = total_steps - 1 if denominator == "right" else total_steps
        if step >= last and after == "min":
            return min_lr
        span = total_steps - 1 - warmup_steps if denominator == "right" else total_steps - warmup_steps
        progress = (step - warmup_steps) / max(1, span)
        low = min_lr if floor else 0.0
        return low + (max_lr - low) * (1 + math.cos(math.pi * progress)) / 2

    return variant


def locate_lr(call) -> str | None:
    """A schedule with 4 warm-up steps over 14 in all, max_lr 1 and min_lr 0.1, read step by step."""
    settings = (1.0, 4, 14, 0.1)  # max_lr, warmup_steps, total_steps, min_lr

    def cosine(step):
        return 0.1 + 0.9 * (1 + math.cos(math.pi * (step - 4) / (14 - 1 - 4))) / 2

    for step, want, step_name, fix in (
            (0, 0.25, "the warm-up", "steps count from 0, and step 0 already has (0 + 1) / 4 of max_lr"),
            (3, 1.0, "the warm-up", "the last warm-up step, 3, reaches max_lr: max_lr * (step + 1) / warmup_steps"),
            (4, 1.0, "the cosine", "the cosine starts at max_lr at step warmup_steps"),
            (13, 0.1, "the cosine's end", "the cosine reaches min_lr at total_steps - 1 (not 0, and not a step "
             "later): p = (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps)"),
            (8, cosine(8), "the cosine", "lr = min_lr + (max_lr - min_lr) * (1 + cos(pi p)) / 2"),
            (20, 0.1, "after the end", "past total_steps the rate stays min_lr")):
        value = call(step, *settings)
        got = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
        if got is None or abs(got - want) > 1e-9:
            if step_name == "the warm-up" and got is not None and abs(got - 0.2) < 1e-9:
                fix = "(step + 1) / (warmup_steps + 1) never reaches max_lr: divide by warmup_steps"
            return (f"{step_name}. With max_lr 1, warmup_steps 4, total_steps 14 and min_lr 0.1, lr_at({step}) is "
                    f"{want:.4g}; yours is {describe(value) if got is None else f'{got:.4g}'}: {fix}")
    return None


# ---------------------------------------------------------------- clip_grad_norm

CLIP_FIELDS = dict(vocab_size=13, context_length=6, d_model=8, n_layers=1, n_heads=2, d_ff=12, tie_weights=False)


TINY_NORM = 2e-6  # a global norm this small makes max_norm / total_norm twice max_norm / (total_norm + 1e-6)
TINY_ONLY = "blocks.0.ffn.fc2.weight"


def clip_inputs(ratio, frozen=None, dtype="float32", facet_name="grads", norm=None, only=None):
    """The course's GPT with weights, ids and an upstream gradient drawn from the check's seed;
    max_norm is `ratio` times the gradients' global norm (below 1: they must shrink), which is
    `norm` where given (the upstream gradient scaled to give it). `frozen`: a submodule whose
    parameters get no gradient; `only`: the one parameter that gets one."""

    def make(rng):
        from coursekit.gpt import GPT

        from ..engine.weights import random_state

        fields = CLIP_FIELDS
        state = random_state(GPT(types.SimpleNamespace(**fields)), int(rng.integers(0, 2**31)))
        ids = torch.from_numpy(rng.integers(0, fields["vocab_size"], (2, fields["context_length"]))).long()
        upstream = torch.from_numpy(rng.normal(size=(2, fields["context_length"], fields["vocab_size"]))).float()
        return Inputs((), {"state": state, "ids": ids, "upstream": upstream, "ratio": ratio, "frozen": frozen,
                           "dtype": dtype, "facet": facet_name, "norm": norm, "only": only})

    return make


def clip_probe(api, inputs: Inputs):
    """Gradients from a backward pass in the worker; clip_grad_norm(model.parameters(), max_norm); the
    grader reads the gradients before and after and judges them (see `clip_facet`)."""
    kw = inputs.kwargs
    model = api.given(MODEL, api.record(**CLIP_FIELDS))
    api.method(model, "load_state_dict", kw["state"])
    if kw["dtype"] == "float64":
        api.method(model, "double", keep=True)
    if kw["frozen"]:  # these parameters get no gradient: .grad stays None
        api.method(api.method(model, "get_submodule", kw["frozen"], keep=True), "requires_grad_", False, keep=True)
    if kw.get("only"):
        api.method(model, "requires_grad_", False, keep=True)
        api.method(api.method(model, "get_parameter", kw["only"], keep=True), "requires_grad_", True, keep=True)
    upstream = kw["upstream"].double() if kw["dtype"] == "float64" else kw["upstream"]
    api.forward(model, kw["ids"], backward=upstream)
    before = grad_dict(api.grads(model))
    if before is None:
        return facet(False, "unreadable", "the grader could not read the model's gradients")
    if kw.get("norm"):  # the gradients are linear in the upstream one: once more, scaled to that norm
        api.method(model, "zero_grad")
        api.forward(model, kw["ids"], backward=upstream * (kw["norm"] / global_norm(before)))
        before = grad_dict(api.grads(model))
        if before is None:
            return facet(False, "unreadable", "the grader could not read the model's gradients")
    total = global_norm(before)
    max_norm = kw["ratio"] * total
    held = None
    if kw["facet"] == "in_place":  # one gradient tensor as it is before the call, held where the model is
        name = next(name for name, g in before.items() if g is not None)
        held = (name, api.method(api.method(model, "get_parameter", name, keep=True), "__getattribute__", "grad",
                                 keep=True))
    returned = api.call("clip_grad_norm", api.method(model, "parameters", keep=True), max_norm)
    if held is not None:
        name, tensor = held
        after_held = api.method(tensor, "clone")
        after = grad_dict(api.grads(model))
        if after is None or not isinstance(after_held, torch.Tensor):
            return facet(False, "unreadable", "the grader could not read the model's gradients after the call")
        return facet(after.get(name) is not None and after_held.shape == after[name].shape
                     and torch.equal(after_held.double(), after[name].double()), "rebound",
                     f"`{name}.grad` after the call is a new tensor, and the tensor it was holds the gradient as it "
                     "was: scale each gradient in place (p.grad.mul_(scale)) rather than rebinding it "
                     "(p.grad = p.grad * scale), so whatever holds the gradient (an optimizer, a hook) sees the clip")
    after = grad_dict(api.grads(model))
    weights = api.method(model, "state_dict")
    if after is None:
        return facet(False, "unreadable", "the grader could not read the model's gradients after the call")
    return clip_facet(kw["facet"], before, after, returned, max_norm, kw["state"], weights)


def grad_dict(grads) -> dict | None:
    """{name: a copy of its gradient, or None} as read from the model (copies: trusted code hands back
    the .grad tensors themselves, which the call then scales); None when it is not that (data that
    came from the worker is only believed once checked)."""
    if not isinstance(grads, dict) or not all(
            isinstance(k, str) and (g is None or (isinstance(g, torch.Tensor) and g.is_floating_point()))
            for k, g in grads.items()):
        return None
    return {name: g.detach().clone() if g is not None else None for name, g in grads.items()}


def global_norm(grads: dict) -> float:
    return math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values() if isinstance(g, torch.Tensor)))


def _scaled_like(before: dict, after: dict, factors: dict) -> bool:
    """Every gradient after == before times its factor (float32 round-off allowed); None stays None."""
    for name, g in before.items():
        a = after.get(name) if isinstance(after, dict) else None
        if g is None:
            if a is not None:
                return False
            continue
        if not isinstance(a, torch.Tensor) or a.shape != g.shape:
            return False
        want = g.double() * factors[name]
        # round-off relative to the gradients' own size: tiny gradients (TINY_NORM) are judged as closely
        if not torch.allclose(a.double(), want, rtol=1e-4, atol=1e-7 * float(want.abs().max())):
            return False
    return True


def same_weights(weights, state: dict) -> bool:
    """Whether a state dict read from the model holds exactly the weights loaded into it."""
    return isinstance(weights, dict) and set(weights) == set(state) and all(
        isinstance(weights[k], torch.Tensor) and weights[k].shape == v.shape and weights[k].is_floating_point()
        and torch.equal(weights[k].double(), v.double()) for k, v in state.items())


def clip_facet(which, before, after, returned, max_norm, state, weights) -> dict:
    """One facet of a clip_grad_norm call: "grads" (how the gradients changed), "norm" (what it
    returned) or "weights" (the parameters themselves left alone)."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return facet(False, "unreadable", "the grader could not read the model's gradients")
    total = global_norm(before)
    scale = min(1.0, max_norm / (total + 1e-6))
    if which == "weights":
        same = same_weights(weights, state)
        return facet(same, "weights", "the model's weights changed: clipping scales the gradients (p.grad), never the "
                     "parameters themselves (p or p.data)")
    if which == "norm":
        value = number(returned)
        if value is None:
            return facet(False, "format", f"returned {describe(returned)}, expected the total norm (a float or a "
                         "0-d tensor)")
        if math.isclose(value, total, rel_tol=1e-4):
            return facet(True, None)
        after_norm = global_norm(after)
        per_tensor = sum(math.sqrt(float((g.double() ** 2).sum())) for g in before.values() if g is not None)
        for detail, candidate, why in (
                ("after", after_norm, "the norm after clipping: compute and keep total_norm before scaling"),
                ("squared", total ** 2, "the sum of squares: take its square root"),
                ("summed", per_tensor, "the sum of each tensor's norm: the global norm is the square root of the sum "
                 "of every gradient's squares")):
            if math.isclose(value, candidate, rel_tol=1e-4):
                return facet(False, detail, f"returned {value:.6g}, the total norm before clipping is {total:.6g}; "
                             f"yours looks like {why}")
        return facet(False, "wrong", f"returned {value:.6g}, the total norm before clipping is {total:.6g} (the L2 "
                     "norm of all the gradients together)")
    # which == "grads"
    if any(before[name] is None and after.get(name) is not None for name in before):
        return facet(False, "filled", "a parameter that had no gradient (.grad None) has one after the call: skip "
                     "parameters whose .grad is None")
    if _scaled_like(before, after, {name: scale for name in before}):
        return facet(True, None)
    per = {name: min(1.0, max_norm / (float(g.double().norm()) + 1e-6)) if g is not None else 1.0
           for name, g in before.items()}
    if scale < 1.0 and _scaled_like(before, after, {name: 1.0 for name in before}):
        return facet(False, "unchanged", f"the gradients' global norm is {total:.4g}, above max_norm = "
                     f"{max_norm:.4g}, but the gradients did not change: scale each p.grad in place "
                     "(p.grad.mul_(scale)); a copy (g = g * scale) leaves .grad as it was, and a generator of "
                     "parameters is empty the second time it is looped over (make a list first)" + (
                         ". (Or each gradient was clipped by its own norm, none of which is above max_norm here: "
                         "clipping uses the norm of all of them together)" if all(f == 1.0 for f in per.values())
                         else ""))
    if _scaled_like(before, after, per):
        return facet(False, "per_tensor", "each gradient was clipped by its own norm: clipping by the global norm "
                     "scales every gradient by the same factor, min(1, max_norm / (total_norm + 1e-6)), with "
                     "total_norm the L2 norm of all of them together")
    no_eps = min(1.0, max_norm / total) if total else 1.0
    if abs(no_eps - scale) > 1e-3 * scale and _scaled_like(before, after, {name: no_eps for name in before}):
        return facet(False, "no_eps", f"the gradients were scaled by max_norm / total_norm = {no_eps:.4g}, not by "
                     f"min(1, max_norm / (total_norm + 1e-6)) = {scale:.4g}: with a global norm as small as "
                     f"{total:.3g} the + 1e-6 counts (it keeps the factor finite when every gradient is 0)")
    if scale == 1.0:
        return facet(False, "below", f"the gradients' global norm is {total:.4g}, below max_norm = {max_norm:.4g}, "
                     "so nothing should change, but they did: the factor is min(1, max_norm / (total_norm + 1e-6)), "
                     "never above 1")
    return facet(False, "scale", f"the gradients were not scaled by min(1, max_norm / (total_norm + 1e-6)) = "
                 f"{scale:.4g} (global norm {total:.4g}, max_norm {max_norm:.4g}), the same factor for every one")


def clip_with(per_tensor=False, norm_after=False, copy=False, no_min=False, squared=False, summed=False,
              weights=False, no_eps=False, rebind=False):
    def variant(reference, parameters, max_norm):
        params = [p for p in parameters if p.grad is not None]
        norms = [g.detach().double().norm() for g in (p.grad for p in params)]
        if summed:
            total = sum(norms)
        else:
            total = torch.sqrt(sum(n ** 2 for n in norms))
        if squared:
            total = total ** 2
        factor = max_norm / (float(total) + (0.0 if no_eps else 1e-6))
        scale = factor if no_min else min(1.0, factor)
        with torch.no_grad():
            for p, n in zip(params, norms, strict=True):
                own = min(1.0, max_norm / (float(n) + 1e-6)) if per_tensor else scale
                if copy:
                    g = p.grad * own  # noqa: F841 - the mistake: a copy, .grad unchanged
                elif rebind:
                    p.grad = p.grad * own
                elif weights:
                    p.mul_(own)
                else:
                    p.grad.mul_(own)
        if norm_after:
            return torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params))
        return total

    return variant


# ---------------------------------------------------------------- evaluate

EVAL_FIELDS = dict(vocab_size=32, context_length=8, d_model=16, n_layers=1, n_heads=2, d_ff=None, tie_weights=False)
# Deep, on 256 short windows in one batch, its layers computed by the grader (no_grad_probe): an
# autograd graph of that forward pass keeps 2 x n_layers tensors of (256, 4, d_ff), each block's
# GELU input and the input of the layer after it (64 MiB in float32; 86 MB measured, everything
# else included); without gradients the worker holds one of them at a time, and the copies that
# carry it to the grader and back (8 MB measured, the line at 32). Many narrow blocks rather than
# a few wide ones: that transient grows with a block's width, the graph with the number of blocks.
# Every layer's input and output crosses the channel, so the work is the volume of the graph
# (0.6 s of the worker's CPU, as much of the grader's); windows of 4 keep an evaluation over
# overlapping windows (stride 1) to 4 times that.
GRAD_FIELDS = dict(vocab_size=64, context_length=4, d_model=32, n_layers=16, n_heads=2, d_ff=512, tie_weights=True)
GRAD_WINDOWS = 256
# The course GPT's own initialisation gives near-uniform predictions: its loss is about log(vocab_size)
# (4.16 nats here; within a few hundredths), whatever windows are measured. A returned loss this close
# shows the model was run, without judging the value again (the value checks do).
UNTRAINED_SPREAD = 0.5


def eval_inputs(length, batch_size, mode="train", facet_name=None):
    def make(rng):
        from coursekit.gpt import GPT

        from ..engine.weights import random_state

        fields = EVAL_FIELDS
        state = random_state(GPT(types.SimpleNamespace(**fields)), int(rng.integers(0, 2**31)))
        data = torch.from_numpy(rng.integers(0, fields["vocab_size"], length)).long()
        return Inputs((), {"fields": fields, "state": state, "data": data, "batch_size": batch_size,
                           "mode": mode, "facet": facet_name})

    return make


def remote(api, inputs: Inputs, mode: str):
    """The course's GPT with the check's weights, its layers computed by the grader, in `mode`."""
    model = api.remote_model(inputs.kwargs["fields"], inputs.kwargs["state"], {})
    api.method(model, mode, keep=True)
    return model


def grader_side(api, handle):
    """The real GPT behind a model handed to the part: for a remote model, the grader's half, which
    computes every layer the student's code calls; for trusted code, the model itself."""
    if api.trusted:
        return handle
    obj = getattr(handle, "obj", None)  # trusted code under the student's interface (the course's tests)
    if obj is not None:
        return obj
    return api.student.remote[handle.id].model


def in_process(api, handle):
    """The model itself when the code that drives it is trusted (and runs here); None for a worker."""
    return handle if api.trusted else getattr(handle, "obj", None)


def watch_layers(model) -> tuple[list, list]:
    """(the mode of every layer call, the hooks): each Linear, Embedding and LayerNorm call appends
    its module's `training` flag."""
    seen: list[bool] = []
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append(bool(mod.training)))
             for m in model.modules() if isinstance(m, torch.nn.Linear | torch.nn.Embedding | torch.nn.LayerNorm)]
    return seen, hooks


def eval_value_probe(api, inputs: Inputs):
    model = remote(api, inputs, inputs.kwargs["mode"])
    kw = inputs.kwargs
    return {"loss": api.call("evaluate", model, kw["data"], kw["batch_size"], kw["fields"]["context_length"])}


def eval_oracle(inputs: Inputs):
    """The grader's own measurement: the same weights in float64, every whole window at once."""
    from ..trust.watch import trusted_gpt

    kw = inputs.kwargs
    C, data = kw["fields"]["context_length"], kw["data"]
    model = trusted_gpt(kw["fields"], kw["state"]).double().eval()
    starts = range(0, len(data) - C, C)
    x = torch.stack([data[i:i + C] for i in starts])
    y = torch.stack([data[i + 1:i + C + 1] for i in starts])
    with torch.no_grad():
        logits = model(x)
    loss = torch.logsumexp(logits, dim=-1) - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    return {"loss": float(loss.mean())}


# ---------------------------------------------------------------- where a wrong evaluate goes wrong
# A model whose logits are the same at every position, L[v] = -v / 10 (ln_f's weight 0 and its bias
# a unit vector, lm_head's first column the ramp), so that a position's loss says its target,
# logsumexp(L) + y / 10; and the token embedding's calls, which the grader computes, say which
# windows the forward passes saw.

RAMP = 0.1


def ramp_state(fields: dict) -> dict:
    from coursekit.gpt import GPT

    from ..engine.weights import random_state

    state = random_state(GPT(types.SimpleNamespace(**fields)), 11)
    state["ln_f.weight"] = torch.zeros_like(state["ln_f.weight"])
    state["ln_f.bias"] = torch.zeros_like(state["ln_f.bias"])
    state["ln_f.bias"][0] = 1.0
    state["lm_head.weight"][:, 0] = -RAMP * torch.arange(fields["vocab_size"], dtype=state["lm_head.weight"].dtype)
    return state


def _starts(rows: torch.Tensor, data: torch.Tensor) -> list[int] | None:
    """Where in `data` each row is a slice of it (None where one is not)."""
    T, found = rows.shape[-1], []
    for row in rows:
        at = [i for i in range(len(data) - T + 1) if torch.equal(data[i:i + T], row)]
        if not at:
            return None
        found.append(at[0])
    return found


def _ramp_evaluate(api, length: int, batch_size: int):
    """(the loss, the windows the model saw, the data) of evaluate on `length` ids, on the ramp model."""
    fields = EVAL_FIELDS
    data = torch.from_numpy(np.random.default_rng(5).integers(0, fields["vocab_size"], length)).long()
    model = api.remote_model(fields, ramp_state(fields), {"token_emb": "input"})
    api.method(model, "train", keep=True)
    try:
        loss = number(api.call("evaluate", model, data, batch_size, fields["context_length"]))
    except ProbeFailed:
        loss = None  # what the model saw before it raised still says which windows it took
    return loss, [r["input"] for r in api.watched(model) if isinstance(r.get("input"), torch.Tensor)], data


def locate_evaluate(api) -> str | None:
    fields, batch_size = EVAL_FIELDS, 2
    V, C = fields["vocab_size"], fields["context_length"]
    loss, rows, data = _ramp_evaluate(api, 6 * C, batch_size)  # 48 ids: 5 whole windows, the sixth a target short
    want = list(range(0, len(data) - C, C))
    setting = f"With {len(data)} ids and C = {C}"
    # It raised, having seen only windows of the contract's (or none): does it raise for want of a
    # target in a last window that is not whole? With one id more, that window is whole.
    before = [r.reshape(-1, C) for r in rows if r.shape[-1] == C]
    prefix = len(before) == len(rows) and (not before or _starts(torch.cat(before), data) == want[:sum(
        len(b) for b in before)])
    if loss is None and prefix:
        again, seen, _ = _ramp_evaluate(api, 6 * C + 1, batch_size)
        if again is not None and seen:
            return (f"the number of windows. {setting} your evaluate raised, and with {6 * C + 1} ids it does not: "
                    f"{len(data)} ids hold {len(want)} whole windows, the sixth being one target short. A window "
                    "needs C + 1 ids: (len(data) - 1) // C windows, not len(data) // C")
    if not rows:
        return None  # no layer calls: the checks say so
    widths = {int(r.shape[-1]) for r in rows}
    if widths != {C}:
        return (f"the windows' length. {setting} each window's inputs are C ids, data[i:i + C]; your model was given "
                f"windows of {sorted(widths)} ids")
    seen = torch.cat([r.reshape(-1, C) for r in rows])
    starts = _starts(seen, data)
    if starts is None:
        return (f"the windows. {setting} the model's inputs are slices of the data, data[i:i + C]; some of yours "
                "are not")
    left = len(want) % batch_size
    if sorted(starts) == want[:len(want) - left] and left:
        # the starts are right, and every whole batch was run: is only the last, smaller batch left out?
        _, alone, _ = _ramp_evaluate(api, len(data), 1)
        one_by_one = _starts(torch.cat([r.reshape(-1, C) for r in alone]), data) if alone and {
            int(r.shape[-1]) for r in alone} == {C} else None
        if one_by_one is not None and sorted(one_by_one) == want:
            return (f"the batches. {setting} the windows start at {want}, and batches of {batch_size} are "
                    f"{[want[i:i + batch_size] for i in range(0, len(want), batch_size)]}; your model saw only the "
                    f"windows starting at {sorted(starts)} (with batch_size 1, every window): the last batch, of "
                    f"{left} window{'s' if left > 1 else ''}, is left out. Loop over range(0, len(starts), batch_size) "
                    "and take starts[b:b + batch_size]: the last batch may be smaller (a loop that stops at "
                    "len(starts) - batch_size + 1 also runs no batch at all when there are fewer windows than "
                    "batch_size)")
    if sorted(starts) != want:
        steps = sorted({b - a for a, b in zip(sorted(starts), sorted(starts)[1:], strict=False)})
        fix = ("step by C: the windows follow one another without overlap or gap" if steps and steps != [C] else
               f"a window needs C + 1 ids (its targets run one further): the last whole one starts at {want[-1]}, "
               "and there are (len(data) - 1) // C of them" if max(starts) > want[-1] else
               "take every whole window, the last included")
        return (f"the window starts. {setting} the windows start at {want}; your model saw windows starting at "
                f"{sorted(starts)}: {fix}")
    if loss is None:
        return None
    inputs = torch.stack([data[i:i + C] for i in want]).double()
    targets = torch.stack([data[i + 1:i + C + 1] for i in want]).double()
    lse = float(torch.logsumexp(-RAMP * torch.arange(V, dtype=torch.float64), dim=0))
    per_window = lse + RAMP * targets.mean(dim=1)
    batches = [per_window[i:i + batch_size].mean() for i in range(0, len(want), batch_size)]
    readings = (
        (lse + RAMP * float(targets.mean()), None),
        (lse + RAMP * float(inputs.mean()), "the targets. The loss your evaluate gives is the one of targets equal to "
         "the inputs: the targets are the next ids, data[i + 1:i + C + 1]"),
        (float(torch.stack(batches).mean()), f"the average. Your loss is the mean of the batches' means; batches of "
         f"{batch_size} windows leave a last one of {len(want) % batch_size or batch_size}, which then weighs as much "
         "as a full one: average over every position (sum the losses and count the positions)"),
        (float((lse + RAMP * targets).sum()), "the average. Your loss is the sum over every position: divide by "
         "the number of positions"),
        (float(batches[-1]), "the average. Your loss is the last batch's alone: accumulate every batch's losses"),
    )
    for value, words in readings:
        if abs(loss - value) < 1e-4 * max(1.0, abs(value)):
            return None if words is None else f"{words} ({setting}, on a model whose loss says each target)"
    return None


NO_LAYER_CALLS = ("no_calls", "the grader saw no call of the model's layers: run the model on the windows, model(x)")


def evaluate_watched(api, inputs: Inputs, mode: str, then_forward: bool = False) -> tuple[list, list]:
    """The student's evaluate on the check's model handed in `mode`: the training flag of every
    layer call during it, and (with `then_forward`) of a forward pass the grader makes after it."""
    kw = inputs.kwargs
    C = kw["fields"]["context_length"]
    model = remote(api, inputs, mode)
    seen, hooks = watch_layers(grader_side(api, model))
    try:
        api.call("evaluate", model, kw["data"], kw["batch_size"], C)
        during = list(seen)
        seen.clear()
        if then_forward:
            api.forward(model, kw["data"][:C].unsqueeze(0))
    finally:
        for hook in hooks:
            hook.remove()
    return during, list(seen)


def eval_mode_probe(api, inputs: Inputs):
    """The mode of every layer call during evaluate (model handed in training mode), and then, on
    a forward pass the grader makes after it, whether the model is back in the mode it was in."""
    if inputs.kwargs["facet"] == "during":
        during, _ = evaluate_watched(api, inputs, "train")
        if not during:
            return facet(False, *NO_LAYER_CALLS)
        return facet(not any(during), "train", f"{sum(during)} of the {len(during)} layer calls during evaluate ran "
                     "in training mode: call model.eval() before the forward passes (and put the mode back after)")
    after = {}  # facet "restores"
    for mode in ("train", "eval"):
        during, after[mode] = evaluate_watched(api, inputs, mode, then_forward=True)
        if not during:
            return facet(False, *NO_LAYER_CALLS)
    if not all(after["train"]):
        return facet(False, "left_eval", "a model in training mode was left in eval mode after evaluate: remember "
                     "was_training = model.training first, and call model.train(was_training) at the end (in a "
                     "finally: block, so an error does not leave it in eval mode either)")
    if any(after["eval"]):
        return facet(False, "forced_train", "a model handed in eval mode came back in training mode: put back the "
                     "mode it was in (model.train(was_training)), not always model.train()")
    return facet(True, None)


def grad_inputs():
    def make(rng):
        from coursekit.gpt import GPT

        C = GRAD_FIELDS["context_length"]
        data = torch.from_numpy(rng.integers(0, GRAD_FIELDS["vocab_size"], GRAD_WINDOWS * C + 1)).long()
        # one batch of 2 windows: every layer, and the channel, called once before the measured run
        warm = torch.from_numpy(rng.integers(0, GRAD_FIELDS["vocab_size"], 2 * C + 1)).long()
        with torch.random.fork_rng(devices=[]):  # the course's own initialisation, from the check's seed
            torch.manual_seed(int(rng.integers(0, 2**31)))
            model = GPT(types.SimpleNamespace(**GRAD_FIELDS))
        layers = [name for name, m in model.named_modules()
                  if isinstance(m, torch.nn.Linear | torch.nn.Embedding | torch.nn.LayerNorm)]
        return Inputs((), {"data": data, "warm": warm, "state": model.state_dict(), "layers": layers})

    return make


def graph_bytes() -> int:
    """What an autograd graph of one forward pass over GRAD_WINDOWS windows keeps at least: the
    input and the output of every block's GELU, (windows, C, d_ff) each, in float32."""
    f = GRAD_FIELDS
    return 2 * f["n_layers"] * GRAD_WINDOWS * f["context_length"] * f["d_ff"] * 4


def layer_batches(records: list) -> dict[str, list[int]]:
    """The windows of every call of each layer, in order: the first dimension of its input, ids (b, C)
    or activations (b, C, d) (the position embedding's input, (C,), has none)."""
    seen: dict[str, list[int]] = {}
    for record in records:
        shape = record.get("shape") if isinstance(record, dict) else None
        if isinstance(shape, list) and len(shape) >= 2 and isinstance(shape[0], int):
            seen.setdefault(str(record.get("module")), []).append(int(shape[0]))
    return seen


def follows_batch_size(seen: dict[str, list[int]], batch_size: int) -> bool:
    """Every layer ran the same batches, each of batch_size windows but the last, which holds at most
    that many: min(batch_size, windows left) windows per forward pass."""
    runs = {tuple(sizes) for sizes in seen.values()}
    if len(runs) != 1:
        return False
    sizes = runs.pop()
    return bool(sizes) and all(n == batch_size for n in sizes[:-1]) and 1 <= sizes[-1] <= batch_size


def _sizes_text(seen: dict[str, list[int]]) -> str:
    sizes = seen.get("token_emb") or next(iter(seen.values()), [])
    shown = ", ".join(map(str, sizes[:6])) + (", ..." if len(sizes) > 6 else "")
    return f"{shown} ({len(sizes)} calls of the token embedding)" if sizes else "none"


def no_grad_probe(api, inputs: Inputs):
    """The course's GPT, deep and wide, whose layers run in the grader and are linked into the worker's
    autograd graph as a real model's are (`remote_model(autograd=True)`): the grader sees the windows
    of every layer call, so the forward passes must follow batch_size; then the memory the worker
    adds during the evaluation (`memory_call`, read from /proc) is judged against what a graph of that
    forward pass keeps. Trusted code shows its grad mode from inside instead."""
    kw = inputs.kwargs
    C = GRAD_FIELDS["context_length"]
    # A short run first, on a model of its own: the first calls of PyTorch's operators (and of the
    # channel) page in code, which counts as resident memory too.
    warm = api.remote_model(GRAD_FIELDS, kw["state"], {}, autograd=True)
    api.method(warm, "train", keep=True)
    api.call("evaluate", warm, kw["warm"], 2, C)
    model = api.remote_model(GRAD_FIELDS, kw["state"], {name: "shape" for name in kw["layers"]}, autograd=True)
    api.method(model, "train", keep=True)
    real = in_process(api, model)
    modes: list[bool] = []
    if real is not None:  # trusted code: the grad mode of its forward passes, seen from inside
        hook = real.register_forward_hook(lambda mod, args, out: modes.append(torch.is_grad_enabled()))
        try:
            value, footprint = api.call("evaluate", model, kw["data"], GRAD_WINDOWS, C), None
        finally:
            hook.remove()
    else:
        value, footprint = api.memory_call("evaluate", model, kw["data"], GRAD_WINDOWS, C)
    seen = layer_batches(api.watched(model))
    loss, untrained = number(value), math.log(GRAD_FIELDS["vocab_size"])
    if loss is None or not abs(loss - untrained) < UNTRAINED_SPREAD:
        return facet(False, "no_loss", f"evaluate returned {describe(value) if loss is None else f'{loss:.4g}'} for "
                     f"an untrained model, whose loss is about log({GRAD_FIELDS['vocab_size']}) = {untrained:.3f}: "
                     "is the model run on the windows?")
    if not follows_batch_size(seen, GRAD_WINDOWS):
        return facet(False, "batches", f"could not be judged: the forward passes did not follow batch_size. With "
                     f"batch_size {GRAD_WINDOWS} and {GRAD_WINDOWS} windows, the model's layers ran on batches of "
                     f"{_sizes_text(seen)} windows; take batch_size windows per forward pass (fewer in the last one "
                     "only), and run every layer once per batch: what an evaluation holds is measured on batches "
                     "of the size it is asked for")
    if real is not None:
        return facet(not any(modes), "grad", grad_message())
    peak = footprint.get("peak_bytes") if isinstance(footprint, dict) else None
    if not isinstance(peak, int):
        return facet(True, None)  # /proc could not tell: not graded
    return facet(peak < graph_bytes() // 2, "grad",
                 grad_message(f" (while it ran, your process held up to {peak / 2**20:,.0f} MB more than before; "
                              f"the autograd graph of that forward pass takes about {graph_bytes() / 2**20:,.0f} MB)"))


def grad_message(measured: str = "") -> str:
    return ("the forward passes kept an autograd graph: evaluating a model of 16 blocks on 256 windows of 4 "
            f"tokens took as much memory as a training step's forward pass{measured}. Run them under "
            "torch.no_grad(): nothing is trained here")


def unchanged_probe(api, inputs: Inputs):
    """A real GPT in the worker with the check's weights: after evaluate, the weights are the same and
    no gradient is left in them."""
    kw = inputs.kwargs
    model = api.given(MODEL, api.record(**kw["fields"]))
    api.method(model, "load_state_dict", kw["state"])
    value = api.call("evaluate", model, kw["data"], kw["batch_size"], kw["fields"]["context_length"])
    weights = api.method(model, "state_dict")
    grads = api.grads(model)
    loss, want = number(value), eval_oracle(inputs)["loss"]
    if loss is None or not abs(loss - want) < 0.5:  # about the right loss: the model was run
        return facet(False, "no_loss", f"evaluate returned {describe(value) if loss is None else f'{loss:.4g}'}, "
                     f"far from the model's loss on those windows, {want:.4g}: is the model run on the windows?")
    if not same_weights(weights, kw["state"]):
        return facet(False, "weights", "the model's weights changed during evaluate: evaluation only measures")
    left = isinstance(grads, dict) and any(isinstance(g, torch.Tensor) for g in grads.values())
    return facet(not left, "grads", "evaluate left gradients in the model's parameters: evaluation calls no "
                 "backward(), and gradients left there are added to the next training step's")


def diagnose_eval(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    if isinstance(expected, dict) and "ok" in expected:
        return diagnose_facet(result, expected, "the evaluation")
    if not isinstance(result, dict) or "loss" not in result:
        return f"could not follow the call ({describe(result)})"
    got, want = number(result["loss"]), float(expected["loss"])
    if got is None:
        return f"returned {describe(result['loss'])}, expected a float: the mean loss"
    if math.isclose(got, want, rel_tol=tol.rtol, abs_tol=tol.atol):
        return None
    kw = inputs.kwargs
    C, n = kw["fields"]["context_length"], len(kw["data"])
    windows = len(range(0, n - C, C))
    return (f"returned {got:.6g}; the mean loss over the {windows} whole windows starting at 0, {C}, {2 * C}, ... "
            f"of {n} ids (batches of {kw['batch_size']}) is {want:.6g}. Each window needs C + 1 ids (its targets "
            "are shifted by one); weight each batch's mean by its number of positions, since the last batch may be "
            "smaller")


def eval_with(train_mode=False, grad=False, stride=None, unweighted=False, restore="right", last=True,
              count_windows=False, backward=False):
    """restore: "right", "never" (left in eval mode) or "always_train"; last=False drops the last
    window (range(0, len(data) - C - 1, C)); count_windows: len(data) // C windows, the last one
    without its target when C divides len(data)."""

    def variant(reference, model, data, batch_size, context_length):
        C = context_length
        data = torch.as_tensor(data, dtype=torch.long)
        if count_windows:
            starts = [i * C for i in range(len(data) // C)]
        else:
            starts = list(range(0, len(data) - C - (0 if last else 1), stride or C))
        was_training = model.training
        if not train_mode:
            model.eval()
        total, count, means = 0.0, 0, []
        with torch.set_grad_enabled(grad or backward):
            for first in range(0, len(starts), batch_size):
                batch = starts[first:first + batch_size]
                x = torch.stack([data[i:i + C] for i in batch])
                y = torch.stack([data[i + 1:i + C + 1] for i in batch])
                loss = reference.cross_entropy(model(x), y)
                if backward and loss.requires_grad:
                    loss.backward()
                loss = loss.item()
                total, count = total + loss * y.numel(), count + y.numel()
                means.append(loss)
        if restore == "right":
            model.train(was_training)
        elif restore == "always_train":
            model.train()
        return sum(means) / len(means) if unweighted else total / count

    return variant


# ---------------------------------------------------------------- the catalogue

MISCONCEPTIONS = (
    Misconception("ce_no_max_shift", "a log-sum-exp without the max shift, log(sum(exp(z)))",
                  "exp(1e4) is inf in float32 (and exp(-1e4) is 0): subtract the row's maximum m first, "
                  "logsumexp(z) = m + log(sum(exp(z - m))), or call torch.logsumexp.",
                  {"cross_entropy": ce_with(shift=False)}),
    Misconception("ce_max_not_added_back", "the row's maximum subtracted inside the log-sum-exp but not added back",
                  "logsumexp(z) = m + log(sum(exp(z - m))): the shift by m must be undone after the log.",
                  {"cross_entropy": ce_with(add_back=False)}),
    Misconception("ce_sum_not_mean", "the losses of the positions summed instead of averaged",
                  "Return the mean over every position (.mean()), so the loss does not grow with the batch.",
                  {"cross_entropy": ce_with(reduce="sum")}),
    Misconception("ce_mean_over_first_axis", "a sum divided by the logits' first dimension (the batch), not by "
                  "the number of positions",
                  "Average over every position of logits (..., V): flatten to (N, V) first, then .mean() over N.",
                  {"cross_entropy": ce_with(reduce="first")}),
    Misconception("ce_wrong_sign", "the log-likelihood itself, not its negative",
                  "The loss is -log softmax(z)_t = logsumexp(z) - z_t, which is never negative.",
                  {"cross_entropy": ce_with(sign=-1.0)}),
    Misconception("ce_every_row_target", "log-probabilities indexed with [:, targets], which takes every target "
                  "in every row",
                  "Pick one entry per row: logprobs[torch.arange(N), targets], or "
                  "logprobs.gather(1, targets.unsqueeze(1)).",
                  {"cross_entropy": ce_with(every_row=True)}),
    Misconception("lr_warmup_from_zero", "a warm-up of max_lr * step / warmup_steps (off by one)",
                  "Steps count from 0: max_lr * (step + 1) / warmup_steps, so the first step already moves and "
                  "step warmup_steps - 1 reaches max_lr.",
                  {"lr_at": lr_with(warmup="from_zero")}),
    Misconception("lr_warmup_never_reaches_max", "a warm-up of max_lr * (step + 1) / (warmup_steps + 1)",
                  "Divide by warmup_steps: max_lr * (step + 1) / warmup_steps reaches max_lr at step "
                  "warmup_steps - 1.",
                  {"lr_at": lr_with(warmup="plus_one")}),
    Misconception("lr_cosine_misses_floor", "a cosine over total_steps - warmup_steps steps, which has not reached "
                  "min_lr at the last step",
                  "p = (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps): p is 1, and the rate "
                  "min_lr, at step total_steps - 1, the last step.",
                  {"lr_at": lr_with(denominator="total")}),
    Misconception("lr_decays_to_zero", "a cosine that decays to 0, ignoring min_lr",
                  "min_lr + (max_lr - min_lr) * (1 + cos(pi * p)) / 2 decays to the floor min_lr, not to 0.",
                  {"lr_at": lr_with(floor=False)}),
    Misconception("lr_cosine_past_the_end", "a cosine that goes on after total_steps - 1 and climbs back up",
                  "From step total_steps - 1 on, return min_lr: the cosine's p must not pass 1.",
                  {"lr_at": lr_with(after="cosine")}),
    Misconception("clip_per_tensor", "each gradient clipped by its own norm",
                  "Compute one total norm over all the gradients, sqrt(sum of every g.pow(2).sum()), and scale "
                  "every gradient by the same factor.",
                  {"clip_grad_norm": clip_with(per_tensor=True)}),
    Misconception("clip_returns_norm_after", "the norm returned after clipping instead of before",
                  "Return the total norm computed before the gradients are scaled: it shows how large they were.",
                  {"clip_grad_norm": clip_with(norm_after=True)}),
    Misconception("clip_grads_not_changed", "gradients that never change in place (a scaled copy, or a generator "
                  "looped over twice)",
                  "Scale p.grad itself (p.grad.mul_(scale)); and since parameters may be a generator, which is "
                  "empty once looped over, make a list of them first.",
                  {"clip_grad_norm": clip_with(copy=True)}),
    Misconception("clip_scales_up", "a factor max_norm / total_norm applied even when the norm is below max_norm",
                  "The factor is min(1, max_norm / (total_norm + 1e-6)): small gradients are left as they are.",
                  {"clip_grad_norm": clip_with(no_min=True)}),
    Misconception("clip_no_sqrt", "a total norm without the square root (the sum of squares)",
                  "total_norm = sqrt(sum over the gradients of (g ** 2).sum()).",
                  {"clip_grad_norm": clip_with(squared=True)}),
    Misconception("clip_sums_norms", "a total norm that adds up each tensor's norm",
                  "Norms do not add: the global norm is sqrt(sum of the squared norms), the L2 norm of all the "
                  "gradients as one vector.",
                  {"clip_grad_norm": clip_with(summed=True)}),
    Misconception("clip_no_eps", "a factor max_norm / total_norm, without the + 1e-6",
                  "The factor is min(1, max_norm / (total_norm + 1e-6)): the + 1e-6 keeps it finite when the "
                  "gradients are all zero, and changes it when their norm is tiny.",
                  {"clip_grad_norm": clip_with(no_eps=True)}),
    Misconception("clip_rebinds_grad", "gradients replaced by scaled copies (p.grad = p.grad * scale) rather than "
                  "scaled in place",
                  "Scale each gradient in place, p.grad.mul_(scale) (under torch.no_grad() or on p.grad.detach()): "
                  "the contract asks for the same tensors, scaled.",
                  {"clip_grad_norm": clip_with(rebind=True)}),
    Misconception("clip_scales_weights", "the parameters scaled instead of their gradients",
                  "Clipping changes p.grad only: p.grad.mul_(scale), never p or p.data.",
                  {"clip_grad_norm": clip_with(weights=True)}),
    Misconception("eval_training_mode", "an evaluation run in training mode",
                  "Call model.eval() before the forward passes: layers such as dropout behave differently in "
                  "training mode. Put the mode back afterwards.",
                  {"evaluate": eval_with(train_mode=True)}),
    Misconception("eval_with_gradients", "an evaluation that keeps autograd graphs (no torch.no_grad())",
                  "Wrap the forward passes in `with torch.no_grad():` (or torch.inference_mode()): the graph costs "
                  "memory and time, and nothing is trained.",
                  {"evaluate": eval_with(grad=True)}),
    Misconception("eval_calls_backward", "an evaluation that calls loss.backward(), as a training step does",
                  "Evaluation only measures: no backward() and no optimizer, and the forward passes under "
                  "torch.no_grad(). Gradients left in the parameters would be added to the next training step's.",
                  {"evaluate": eval_with(backward=True)}),
    Misconception("eval_overlapping_windows", "windows that overlap (starting at every position, stride 1)",
                  "The windows start at 0, C, 2C, ...: range(0, len(data) - C, C).",
                  {"evaluate": eval_with(stride=1)}),
    Misconception("eval_unweighted_batch_means", "the mean of the batches' mean losses, unweighted",
                  "The last batch may hold fewer windows: add up loss * (number of positions) per batch and divide "
                  "by the total number of positions.",
                  {"evaluate": eval_with(unweighted=True)}),
    Misconception("eval_misses_last_window", "a range of starts that stops one window short",
                  "A window at i needs data[i : i + C + 1], so i may go up to len(data) - C - 1: "
                  "range(0, len(data) - C, C).",
                  {"evaluate": eval_with(last=False)}),
    Misconception("eval_window_without_target", "len(data) // C windows, the last of which has no target when C "
                  "divides len(data)",
                  "Each window needs C + 1 ids (its targets are shifted by one): the starts are "
                  "range(0, len(data) - C, C).",
                  {"evaluate": eval_with(count_windows=True)}),
    Misconception("eval_mode_not_restored", "a model left in eval mode after the evaluation",
                  "Remember was_training = model.training before model.eval(), and call "
                  "model.train(was_training) at the end.",
                  {"evaluate": eval_with(restore="never")}),
    Misconception("eval_always_back_to_train", "a model put in training mode after the evaluation whatever its "
                  "mode before",
                  "Put back the mode it was in, model.train(was_training): a model evaluated in eval mode stays "
                  "in eval mode.",
                  {"evaluate": eval_with(restore="always_train")}),
)


PARTS = graded_parts()
