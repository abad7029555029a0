"""`python3 course.py bench <what>`: benchmarks that print figures (nothing here is a test).

    bench generation   the reference `generate` against `generate_cached` (unit 06)
    bench attention    naive, tiled (unit 07's reference) and fused attention: time and peak memory
    bench grading [--students N] [--units U,...]   a class graded by sequential nbgrader and by
                       `course.py autograde --workers 2`, side by side
    bench load [--units U,...]   every unit's reference graded 4 at a time beside 4 busy loops per
                       core, twice, and by `course.py autograde --workers 4`: all full marks?
    bench feedback [--students N] [--limit L] [--workers W] [--no-attacker] [--slow]   the feedback service on
                       localhost: each student sends two checks of unit 01 at once, alone and then beside an
                       attacker; checks per minute, the honest median and p95 latency of both (--slow: the slow
                       notebook on its own, as it should end once grading has a budget per run)
    bench feedback-latency [--units U,...] [--repeats N] [--before COMMIT]   the check line's time per
                       unit, for one cheap part and the whole notebook, right and wrong answers, cold and
                       warm, with the CPU seconds of every process a check starts: this tree beside COMMIT
    bench tokenizer [--mb M] [--vocab V]   unit 08's reference BPE (pure Python) beside Hugging Face
                       `tokenizers` on the same slice of the corpus: MB/s to learn merges and to encode;
                       then checks that both learn the same merges where their rules agree

Figures are measured side by side in one run, on the GPU when there is one (else the CPU).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

from ..engine.reference import load_reference

BEFORE = "fb869f4"  # issue 27's "before": main when the check line's times were taken


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_generation(new_tokens=(128, 256, 512), prompt_length=64, repeats=3, log=print) -> dict:
    """A GPT of about 10M parameters (d_model 384, 6 layers, 6 heads, bytes), greedy decoding."""
    from coursekit.gpt import GPT, GPTConfig

    reference = load_reference("06_generation")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=256, context_length=1024, d_model=384, n_layers=6, n_heads=6)
    model = GPT(config).to(device).eval()
    n_params = sum(p.numel() for p in model.parameters())
    prompt = torch.randint(0, config.vocab_size, (1, prompt_length), device=device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    log(f"GPT: {n_params / 1e6:.1f}M parameters (d_model {config.d_model}, {config.n_layers} layers, "
        f"{config.n_heads} heads), prompt {prompt_length} tokens, greedy, on {name}; torch {torch.__version__}")
    reference.generate_cached(model, prompt, 8, temperature=0)  # warm-up: first calls pay for allocation
    reference.generate(model, prompt, 8, temperature=0)
    rows = []
    log(f"{'new tokens':>10} {'generate':>10} {'cached':>10} {'ms/token':>9} {'ms/token':>9} {'speed-up':>9}"
        "  identical")
    log(f"{'':>10} {'(s)':>10} {'(s)':>10} {'(full)':>9} {'(cached)':>9} {'':>9}")
    for n in new_tokens:
        times = {}
        outputs = {}
        for fn in (reference.generate, reference.generate_cached):
            runs = []
            for _ in range(repeats):
                _sync(device)
                started = time.perf_counter()
                outputs[fn.__name__] = fn(model, prompt, n, temperature=0)
                _sync(device)
                runs.append(time.perf_counter() - started)
            times[fn.__name__] = statistics.median(runs)
        same = torch.equal(outputs["generate"], outputs["generate_cached"])
        speedup = times["generate"] / times["generate_cached"]
        rows.append({"new_tokens": n, "generate_s": times["generate"], "cached_s": times["generate_cached"],
                     "speedup": speedup, "identical": same})
        log(f"{n:>10} {times['generate']:>10.2f} {times['generate_cached']:>10.3f} "
            f"{1000 * times['generate'] / n:>9.1f} {1000 * times['generate_cached'] / n:>9.2f} {speedup:>8.1f}x  "
            f"{'yes' if same else 'NO'}")
    positions = prompt_length + max(new_tokens)
    cache_bytes = 2 * config.n_layers * positions * config.d_model * model.lm_head.weight.element_size()
    log(f"KV cache at {positions} positions: 2 x {config.n_layers} layers x {positions} positions x "
        f"{config.d_model} x {model.lm_head.weight.element_size()} bytes = {cache_bytes / 2**20:.1f} MiB per sequence "
        f"(the weights: {n_params * 4 / 2**20:.1f} MiB)")
    last = rows[-1]
    log(f"kv-cache speedup at {last['new_tokens']} new tokens: {last['speedup']:.1f}x "
        f"(tokens identical: {'yes' if last['identical'] else 'no'})")
    return {"rows": rows, "cache_bytes": cache_bytes, "device": name}


def bench_attention(log=print) -> dict:
    """Unit 07's reference `naive_attention` (the whole score matrix) and `flash_attention` (tiled),
    and the fused FlashAttention kernel: forward, causal, B=1, H=8, d=64."""
    from coursekit.attention_bench import device_name, fused_attention, measure

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = device_name(device)
    reference = load_reference("07_flash_training")
    lengths = [256, 512, 1024, 2048, 4096] + ([8192, 16384] if device.type == "cuda" else [])
    limit = int(0.8 * torch.cuda.get_device_properties(device).total_memory) if device.type == "cuda" else 8 * 2**30
    # The fused FlashAttention kernel takes float32 on a CPU; on a GPU it needs bf16 or fp16.
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    log(f"attention forward, causal, B=1, H=8, d=64, {str(dtype).removeprefix('torch.')}, on {name}; "
        f"torch {torch.__version__}")
    log(f"{'T':>6} {'naive ms':>10} {'tiled ms':>10} {'fused ms':>10} {'naive MiB':>10} {'tiled MiB':>10} "
        f"{'fused MiB':>10}")
    implementations = {"naive": reference.naive_attention, "tiled": reference.flash_attention,
                       "fused": fused_attention}
    rows = measure(implementations, lengths, B=1, H=8, d=64, dtype=dtype, device=device, memory_limit_bytes=limit,
                   repeats=3)
    table = {(r["implementation"], r["T"]): r for r in rows}

    def cell(kind, T, key, scale=1.0, digits=1):
        row = table.get((kind, T))
        if row is None or row["skipped"] or row[key] is None:
            return f"{'-':>10}"
        return f"{row[key] * scale:>10.{digits}f}"

    for T in lengths:
        log(f"{T:>6} " + " ".join(cell(k, T, "ms", digits=2) for k in implementations) + " "
            + " ".join(cell(k, T, "peak_bytes", 1 / 2**20) for k in implementations))
    result = {"rows": rows, "device": name}
    if device.type == "cuda":
        result["bf16"] = bench_attention_bf16(device, log)
    speedup = table[("naive", 2048)]["ms"] / table[("fused", 2048)]["ms"]
    log(f"fused vs naive at T=2048 ({name}): {speedup:.1f}x")
    result["speedup_2048"] = speedup
    return result


def bench_attention_bf16(device, log=print) -> dict:
    """B=4, H=16, d=64 in bf16 up to T=16384: the fused kernel's TFLOP/s beside a large matmul's."""
    from coursekit.attention_bench import fused_attention, measure

    naive = load_reference("07_flash_training").naive_attention
    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    from coursekit.attention_bench import time_call

    matmul_tflops = 2 * n**3 / time_call(torch.matmul, (a, b), device, warmup=3, repeats=10) / 1e12
    del a, b
    limit = int(0.85 * torch.cuda.get_device_properties(device).total_memory)
    rows = measure({"naive": naive, "fused": fused_attention}, [1024, 2048, 4096, 8192, 16384], B=4, H=16,
                   d=64, dtype=torch.bfloat16, device=device, memory_limit_bytes=limit, repeats=5)
    log(f"bf16, B=4, H=16, d=64, causal; a {n}x{n} bf16 matmul runs at {matmul_tflops:.0f} TFLOP/s")
    log(f"{'T':>6} {'naive ms':>10} {'fused ms':>10} {'fused TFLOP/s':>14} {'naive GB':>10} {'fused MB':>10}")
    by = {(r["implementation"], r["T"]): r for r in rows}
    for T in sorted({r["T"] for r in rows}):
        naive, fused = by[("naive", T)], by[("fused", T)]
        flops = 4 * 4 * 16 * T * T * 64 / 2  # two matmuls of 2*T*T*d each, half the tiles under causality
        tflops = flops / (fused["ms"] / 1000) / 1e12
        naive_ms = f"{naive['ms']:>10.2f}" if not naive["skipped"] else f"{'(memory)':>10}"
        naive_gb = f"{naive['cuda_peak_bytes'] / 1e9:>10.1f}" if not naive["skipped"] else \
            f"{4 * 16 * T * T * 2 * 4 / 1e9:>9.1f}*"
        fused_mb = fused["cuda_peak_bytes"] / 1e6
        log(f"{T:>6} {naive_ms} {fused['ms']:>10.2f} {tflops:>14.0f} {naive_gb} {fused_mb:>10.0f}")
    log("(* not run: the estimated need, four (B, H, T, T) bf16 matrices, would not fit)")
    log("The fused kernel stays below the matmul peak at d=64: each tile's matmuls are thin (an inner dimension "
        "of 64), the softmax's exponentials and rescaling run on the ordinary units rather than the tensor "
        "cores, and causal tiles on the diagonal are half wasted.")
    return {"rows": rows, "matmul_tflops": matmul_tflops}


def class_notebooks(unit: str, release, count: int) -> dict[str, object]:
    """`count` submissions of a unit: the six sample students, then the hand-written answers
    of tests/submissions/<unit>/ (correct ones and one-mistake ones) pasted into the last
    solution cell, in turn."""
    import nbformat

    from ..paths import ROOT
    from ..trust.submission import nbgrader_meta
    from .demo import SampleMaker

    maker = SampleMaker(unit, release)
    base = list(maker.students().values())
    for path in sorted((ROOT / "tests" / "submissions" / unit).glob("*.py")):
        nb = maker.notebook()
        last = [c for c in nb.cells if nbgrader_meta(c).get("solution")][-1]
        last.source = path.read_text()
        base.append(nb)
    return {f"s{i:03d}": nbformat.from_dict(base[i % len(base)]) for i in range(count)}


def bench_grading(students: int = 40, units=("01_attention", "02_masking", "03_multihead"), workers: int = 2,
                  log=print) -> dict:
    """Sequential `nbgrader autograde` against `course.py autograde --workers N` on the same class."""
    import shutil
    import tempfile
    from pathlib import Path

    from ..nbgrader import autograde
    from ..nbgrader.course import ScratchCourse
    from ..paths import unit_notebook_name

    root = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    rows, identical = [], True
    try:
        courses = {}
        for how in ("sequential", "parallel"):
            courses[how] = ScratchCourse(root / how)
            courses[how].create()
        for unit in units:
            name = unit_notebook_name(unit)
            for course in courses.values():
                course.generate_assignment(unit)
            notebooks = class_notebooks(unit, courses["sequential"].release / unit / name, students)
            for course in courses.values():
                for student, nb in notebooks.items():
                    course.submit(student, unit, nb, name)
            started = time.perf_counter()
            courses["sequential"].autograde(unit)
            sequential = time.perf_counter() - started
            started = time.perf_counter()
            with open(root / f"{unit}.log", "w") as stream:
                run = autograde.autograde_class(courses["parallel"].path, unit, workers=workers, stream=stream)
            parallel = time.perf_counter() - started
            first = autograde.gradebook_rows(courses["sequential"].path, unit)
            second = autograde.gradebook_rows(courses["parallel"].path, unit)
            for table in (first, second):  # when nbgrader saw the file: differs by construction
                for row in table.values():
                    row.pop("timestamp")
            same = first == second and not run.failures
            identical &= same
            rows.append((unit, students, sequential, parallel, same))
            log(f"{unit}: {students} notebooks, sequential {sequential:.1f} s ({sequential / students:.2f} s each), "
                f"{workers} workers {parallel:.1f} s ({parallel / students:.2f} s each), "
                f"speed-up {sequential / parallel:.2f}x, gradebooks identical: {'yes' if same else 'NO'}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    total_seq = sum(r[2] for r in rows)
    total_par = sum(r[3] for r in rows)
    notebooks = sum(r[1] for r in rows)
    log("")
    log(f"| unit | notebooks | sequential s | s/notebook | {workers} workers s | s/notebook | speed-up |")
    log("| --- | --- | --- | --- | --- | --- | --- |")
    for unit, count, seq, par, _ in rows:
        log(f"| {unit} | {count} | {seq:.1f} | {seq / count:.2f} | {par:.1f} | {par / count:.2f} | {seq / par:.2f}x |")
    log(f"| all | {notebooks} | {total_seq:.1f} | {total_seq / notebooks:.2f} | {total_par:.1f} | "
        f"{total_par / notebooks:.2f} | {total_seq / total_par:.2f}x |")
    log(f"class grading speed-up with {workers} workers: {total_seq / total_par:.1f}x "
        f"(gradebooks identical: {'yes' if identical else 'no'})")
    return {"rows": rows, "identical": identical}


def _spin() -> None:  # a busy loop, for the load benchmark
    while True:
        pass


def bench_load(units=None, at_once: int = 4, busy_per_core: int = 4, rounds: int = 2, workers: int = 4,
               log=print) -> dict:
    """Correct answers graded on a busy machine: every unit's reference, `at_once` `course.py check`
    runs at a time beside `busy_per_core` busy loops per core, `rounds` times over; then
    `course.py autograde --workers N` on a class of `at_once` references per unit, beside the
    same busy loops. Every grading should give full marks: a grade depends on the answer alone."""
    import multiprocessing
    import os
    import shutil
    import subprocess
    import tempfile
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from ..nbgrader import autograde
    from ..nbgrader.course import ScratchCourse
    from ..paths import ROOT, solution_notebook, unit_notebook_name
    from ..units import UNITS
    from .demo import SampleMaker

    units = list(units or UNITS)
    cores = os.cpu_count() or 1
    context = multiprocessing.get_context("spawn")
    spinners = [context.Process(target=_spin, daemon=True) for _ in range(busy_per_core * cores)]
    for spinner in spinners:
        spinner.start()
    log(f"{len(spinners)} busy loops on {cores} cores; {at_once} gradings at a time, {rounds} rounds")

    def check(unit: str) -> tuple[float, float, float]:
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "autograder", "check", unit, str(solution_notebook(unit)),
                               "--json"], cwd=ROOT, capture_output=True, text=True)
        try:
            report = json.loads(proc.stdout)
            return float(report["score"]), float(report["max_score"]), time.perf_counter() - started
        except (ValueError, KeyError):
            return float("nan"), UNITS[unit].points, time.perf_counter() - started

    rows, full, total = [], 0, 0
    root = Path(tempfile.mkdtemp(prefix="bench-load-"))
    try:
        for round_ in range(1, rounds + 1):
            for unit in units:
                with ThreadPoolExecutor(at_once) as pool:
                    results = list(pool.map(check, [unit] * at_once))
                scores = [score for score, _, _ in results]
                most = results[0][1]
                full += sum(score == most for score in scores)
                total += len(scores)
                rows.append((f"check, round {round_}", unit, scores, most, max(t for _, _, t in results)))
                log(f"round {round_} {unit}: {', '.join(f'{s:g}' for s in scores)} of {most:g} "
                    f"(slowest {rows[-1][4]:.0f} s)")
        course = ScratchCourse(root / "course")
        course.create()
        for unit in units:
            name = unit_notebook_name(unit)
            course.generate_assignment(unit)
            maker = SampleMaker(unit, course.release / unit / name)
            for i in range(at_once):
                course.submit(f"ref{i}", unit, maker.notebook(maker.answers), name)
            started = time.perf_counter()
            with open(root / f"{unit}.log", "w") as stream:
                run = autograde.autograde_class(course.path, unit, workers=workers, stream=stream)
            seconds = time.perf_counter() - started
            table = autograde.scores(course.path, unit)
            scores = [table.get(f"ref{i}", (float("nan"), 0))[0] for i in range(at_once)]
            most = UNITS[unit].points
            full += sum(score == most for score in scores)
            total += len(scores)
            rows.append((f"autograde --workers {workers}", unit, scores, most, seconds))
            log(f"autograde --workers {workers} {unit}: {', '.join(f'{s:g}' for s in scores)} of {most:g}, "
                f"{len(run.failures)} not graded, {seconds:.0f} s")
    finally:
        for spinner in spinners:
            spinner.kill()
        shutil.rmtree(root, ignore_errors=True)
    log("")
    log("| grading | unit | scores | full marks | slowest s |")
    log("| --- | --- | --- | --- | --- |")
    for how, unit, scores, most, seconds in rows:
        log(f"| {how} | {unit} | {' '.join(f'{s:g}' for s in scores)} | {sum(s == most for s in scores)}/{len(scores)} "
            f"| {seconds:.0f} |")
    log(f"correct answers graded beside {busy_per_core} busy loops per core: {full} of {total} at full marks")
    return {"rows": rows, "full": full, "total": total}


def bench_feedback(students: int = 25, limit: int = 10, workers: int | None = None, attacker: bool = True,
                   unit: str = "01_attention", log=print) -> dict:
    """The feedback service's load test (tests/test_feedback_load.py runs the same function)."""
    from .load_test import load_test

    return load_test(students=students, limit=limit, workers=workers, attacker=attacker, unit=unit, log=log)


# The class alone, in a course tree of any age: the load test's module moved (issue 28), and a
# tree from before it knows unit 01's class only, which the driver gives another unit's files and
# patterns through the module's own names (its functions read them when they run).
_THROUGHPUT_DRIVER = '''
import json, sys
unit, files, patterns, students, workers = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), \\
    int(sys.argv[4]), (int(sys.argv[5]) or None)
try:
    from autograder.tools import load_test as lt
except ImportError:
    from autograder import feedback_server as lt
lt.LOAD_UNIT, lt.LOAD_PATTERNS = unit, tuple(tuple(p) for p in patterns)
kwargs = dict(students=students, limit=10, workers=workers, files=tuple(files),
              log=lambda line: print(line, file=sys.stderr, flush=True))
if "unit" in lt.load_test.__code__.co_varnames:
    kwargs["unit"] = unit
result = lt.load_test(**kwargs)
figures = {key: result.get(key, float("nan")) for key in ("checks_per_minute", "graded", "seconds", "median_s",
                                                          "p95_s", "workers")}  # (an old tree reports fewer)
print(json.dumps({**figures, "problems": result.get("problems", [])}))
'''


def bench_feedback_throughput(units=("01_attention", "07_flash_training"), before: str | None = BEFORE,
                              students: int = 25, workers: int | None = None, log=print) -> dict:
    """Checks graded per minute by the feedback service for a class of `students` (each sends two
    checks of `unit` at once, every one graded), this tree beside a copy of `before`, run one
    after the other by the same Python."""
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    from ..paths import ROOT
    from .load_test import LOAD_CLASSES

    scratch = Path(tempfile.mkdtemp(prefix="feedback-throughput-"))
    try:
        trees = {"after": ROOT}
        if before:
            trees = {"before": _course_copy(before, scratch / "before"), "after": ROOT}
        rows = {}
        for unit in units:
            files, patterns = LOAD_CLASSES[unit]
            for label, tree in trees.items():
                env = dict(os.environ, PYTHONPATH=str(tree), MPLBACKEND="Agg")
                proc = subprocess.run([sys.executable, "-c", _THROUGHPUT_DRIVER, unit, json.dumps(files),
                                       json.dumps(patterns), str(students), str(workers or 0)],
                                      cwd=tree, env=env, capture_output=True, text=True)
                try:
                    rows[(unit, label)] = json.loads(proc.stdout.strip().splitlines()[-1])
                except (ValueError, IndexError):
                    rows[(unit, label)] = {"problems": [f"no figures (exit {proc.returncode}): {proc.stderr[-800:]}"]}
                row = rows[(unit, label)]
                log(f"{unit} {label:6s}: " + (
                    f"{row['graded']} checks graded in {row['seconds']:.1f} s, {row['checks_per_minute']:.1f} per "
                    f"minute ({row['workers']} workers; median {row['median_s']:.1f} s, p95 {row['p95_s']:.1f} s)"
                    if "graded" in row else "") + (f"; PROBLEMS: {row['problems']}" if row["problems"] else ""))
        log("| unit | " + " | ".join(f"checks per minute, {label}" for label in trees) + " |")
        log("| --- |" + " --- |" * len(trees))
        for unit in units:
            log(f"| {unit} | " + " | ".join(f"{rows[(unit, label)].get('checks_per_minute', float('nan')):.1f}"
                                             for label in trees) + " |")
        return {f"{unit} {label}": row for (unit, label), row in rows.items()}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class MergesDiffer(AssertionError):
    pass


def gpt2_byte_alphabet() -> dict[str, int]:
    """Hugging Face's (and GPT-2's) byte-level tokens spell each byte as one printable character:
    the printable Latin-1 bytes as themselves, the other 68 as chr(256 + k) in byte order. The
    inverse map, character -> byte, turns their tokens back into byte strings."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
                 *range(ord("\u00ae"), ord("\u00ff") + 1)]
    chars = {b: chr(b) for b in printable}
    for k, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + k)
    return {c: b for b, c in chars.items()}


def hf_bpe(text: str | list[str], vocab_size: int):
    """Hugging Face's byte-level BPE trained on `text` (or on a list of texts): GPT-2's pattern (`use_regex=True`), no
    space added in front, all 256 bytes in the alphabet and pairs seen once never merged, as
    the course's contract has it. Returns (tokenizer, merges as (bytes, bytes) pairs)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([text] if isinstance(text, str) else text, trainer)
    to_byte = gpt2_byte_alphabet()
    merges = []
    for merge in json.loads(tokenizer.to_str())["model"]["merges"]:
        a, b = merge.split(" ") if isinstance(merge, str) else merge  # older releases: "a b"
        merges.append((bytes(to_byte[c] for c in a), bytes(to_byte[c] for c in b)))
    return tokenizer, merges


def merges_as_bytes(merges) -> list[tuple[bytes, bytes]]:
    from .tokenized_corpus import token_bytes

    table = token_bytes(merges)
    return [(table[a], table[b]) for a, b in merges]


def first_tie(text: str, merges, pretokenize) -> int:
    """Replays `merges` on `text`'s chunks and returns the index of the first merge made when
    two or more pairs shared the highest count (len(merges) when none was). Up to there any
    two correct BPE trainers agree, whatever their tie rule."""
    from collections import Counter
    from itertools import pairwise

    words = Counter(tuple(chunk.encode("utf-8")) for chunk in pretokenize(text))
    for index, (a, b) in enumerate(merges):
        counts = Counter()
        for word, count in words.items():
            for pair in pairwise(word):
                counts[pair] += count
        top = max(counts.values())
        if sum(count == top for count in counts.values()) > 1:
            return index
        new_id, merged = 256 + index, Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == (a, b):
                    out.append(new_id)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return len(merges)


def compare_merges(text: str, vocab_size: int, train_bpe=None, minimum: int = 20) -> dict:
    """The reference's merges beside Hugging Face's on `text`, up to the first merge chosen
    among tied counts (the two break ties differently: the course takes the greatest pair of
    byte strings, Hugging Face its own order). Raises MergesDiffer if they differ before the
    first tie, or if a tie comes before `minimum` merges (the text proves too little)."""
    ref = load_reference("08_training")
    merges = (train_bpe or ref.train_bpe)(text, vocab_size)
    ours = merges_as_bytes(merges)
    _, theirs = hf_bpe(text, vocab_size)
    agreed_until = first_tie(text, merges, ref.pretokenize)
    if agreed_until < minimum:
        raise MergesDiffer(f"the comparison text has tied counts at merge {agreed_until}, before {minimum}: "
                           "it cannot show the two tokenizers agree; use a longer text")
    for index in range(agreed_until):
        if index >= len(theirs) or ours[index] != theirs[index]:
            got = theirs[index] if index < len(theirs) else "nothing"
            raise MergesDiffer(f"merge {index} differs before any tie: the course's reference learns "
                               f"{ours[index]!r}, Hugging Face {got!r}")
    same_after = sum(1 for x, y in zip(ours, theirs, strict=False) if x == y)
    return {"merges": len(ours), "hf_merges": len(theirs), "untied": agreed_until, "identical_positions": same_after}


def bench_tokenizer(megabytes: float = 2.0, vocab_size: int = 4096, compare_chars: int = 20_000,
                    compare_vocab: int = 512, log=print) -> dict:
    """Throughput on the same text, the first training files of the standard library up to
    `megabytes`: the reference gets them joined as `coursekit.corpus.stdlib_split` joins them,
    Hugging Face gets the files as a list, as it is used (its trainer and `encode_batch` spread
    the files over the cores; its `encode` of the one joined string is timed too). Then
    `compare_merges` on the first `compare_chars` characters."""
    import os

    import tokenizers

    from coursekit.corpus import is_held_out, stdlib_files

    ref = load_reference("08_training")
    files, size = [], 0
    for name, text in stdlib_files():
        if not is_held_out(name) and size < megabytes * 1e6:
            files.append(text)
            size += len(text.encode("utf-8"))
    joined = "\n\n".join(files)
    size = len(joined.encode("utf-8")) / 1e6
    log(f"{size:.2f} MB ({len(files)} training files of the standard library), vocabulary {vocab_size}: the "
        f"course's reference (pure Python, one core) against Hugging Face tokenizers {tokenizers.__version__} "
        f"(Rust, on up to {os.cpu_count()} cores)")
    seconds, results = {}, {}

    def timed(label, fn, *args):
        started = time.perf_counter()
        results[label] = fn(*args)
        seconds[label] = time.perf_counter() - started
        return results[label]

    merges = timed("ref train", ref.train_bpe, joined, vocab_size)
    tokenizer, hf_merges = timed("hf train", hf_bpe, files, vocab_size)
    ids = timed("ref encode", ref.encode, joined, merges)
    batch = timed("hf encode_batch", tokenizer.encode_batch, files)
    single = timed("hf encode", tokenizer.encode, joined)
    log(f"{'MB/s':>22} {'reference':>10} {'tokenizers':>11} {'ratio':>7}")
    for what, theirs in (("train merges", "hf train"), ("encode (files)", "hf encode_batch"),
                         ("encode (one string)", "hf encode")):
        ours = "ref train" if what.startswith("train") else "ref encode"
        log(f"{what:>22} {size / seconds[ours]:>10.2f} {size / seconds[theirs]:>11.2f} "
            f"{seconds[ours] / seconds[theirs]:>6.1f}x")
    hf_tokens = sum(len(encoding.ids) for encoding in batch)
    log(f"merges learned: {len(merges)} and {len(hf_merges)}; tokens: {len(ids):,} and {hf_tokens:,} "
        f"({size * 1e6 / len(ids):.2f} and {size * 1e6 / hf_tokens:.2f} bytes a token; one joined string: "
        f"{len(single.ids):,} Hugging Face tokens)")
    log(f"(wall-clock times; the load average was {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: a busy "
        f"machine slows both, and the multi-threaded one more)")
    small = joined[:compare_chars]
    result = compare_merges(small, compare_vocab)
    log(f"same merges: on {len(small.encode('utf-8')) / 1e3:.0f} KB, the first {result['untied']} merges (every "
        f"one learned before two pairs first tied for the highest count) are identical in both; after that the "
        f"tie rules differ (the course takes the greatest pair of byte strings) and {result['identical_positions']}"
        f" of {result['merges']} positions agree")
    return {"megabytes": size, "seconds": seconds, "tokens": (len(ids), hf_tokens), "compare": result}


BENCHES = {"generation": bench_generation, "attention": bench_attention, "grading": bench_grading,
           "load": bench_load, "feedback": bench_feedback, "tokenizer": bench_tokenizer}


# ------------------------------------------------------------------ the check line's latency
# For each unit, one cheap part (the parts issue 27 timed in the browser where it named one) and
# a submission whose mistake is in that part.
LATENCY_CASES = {
    "01_attention": ("softmax", "correct_einsum", "wrong_softmax_axis_zero"),
    "02_masking": ("causal_mask", "correct_einsum", "wrong_mask_upper_triangle"),
    "03_multihead": ("split_heads", "correct_einsum", "wrong_split_without_transpose"),
    "04_block": ("gelu", "correct_einsum", "wrong_gelu_tanh_approximation"),
    "05_model": ("sinusoidal_positions", "correct_loops", "wrong_sinusoid_exponent_doubled"),
    "06_generation": ("sample_next", "correct_concat_cache", "wrong_temperature_multiplied"),
    "07_flash_training": ("flash_attention", "correct_einsum_tiles", "wrong_flash_no_rescale"),
    "08_training": ("lr_at", "correct_written_plainly", "wrong_lr_warmup_from_zero__lr_at"),
}
REFERENCE = "the reference notebook"  # solutions/UNIT/*.ipynb, as the answer checked


def _snapshot(unit: str, answer_name: str, home, attempt: int, tree):
    """A saved copy of the answer, a file of its own each time: the line answers an unchanged one
    from its cache. The reference is the tree's own solution notebook."""
    from pathlib import Path

    from ..paths import ROOT

    if answer_name == REFERENCE:
        notebook = json.loads(next((Path(tree) / "solutions" / unit).glob("*.ipynb")).read_text())
        notebook.setdefault("metadata", {})["bench_check"] = attempt
        snapshot = home / f"reference-{attempt}.ipynb"
        snapshot.write_text(json.dumps(notebook))
        return snapshot
    source = ROOT / "tests" / "submissions" / unit / f"{answer_name}.py"
    snapshot = home / f"{answer_name}-{attempt}.py"
    snapshot.write_text(source.read_text() + f"\n# check {attempt}\n")
    return snapshot


class _CpuMeter:
    """CPU seconds (user + sys) of a command and of every process it starts, sandboxes included:
    from a cgroup of its own where this machine lets us make one (cgroup v1 cpuacct, v2 cpu.stat),
    else getrusage's children, which misses processes that are not reaped by their parents."""

    def __init__(self, name: str):
        from pathlib import Path

        self.group = None
        for base, stat in ((Path("/sys/fs/cgroup/cpuacct"), "cpuacct.usage"), (Path("/sys/fs/cgroup"), "cpu.stat")):
            try:
                if (base / "cgroup.procs").exists():
                    group = base / name
                    group.mkdir(exist_ok=True)
                    self.group, self.stat = group, group / stat
                    break
            except OSError:
                continue
        self.how = "a cgroup of its own" if self.group else "getrusage of the reaped children"

    def _read(self) -> float:
        text = self.stat.read_text()
        if self.stat.name == "cpu.stat":
            return int(text.split("usage_usec")[1].split()[0]) / 1e6
        return int(text) / 1e9

    def reading(self) -> float:
        """The CPU seconds counted so far (0 without a cgroup: then only `run`'s own figure counts)."""
        return self._read() if self.group else 0.0

    def run(self, command: list[str], **kw) -> tuple[float, float, int]:
        """(wall seconds, CPU seconds, exit status) of `command`."""
        import os
        import resource
        import subprocess

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start_cpu = self._read() if self.group else 0.0
        group = str(self.group / "cgroup.procs") if self.group else None

        def enter() -> None:
            if group:
                with open(group, "w") as f:
                    f.write(str(os.getpid()))

        began = time.perf_counter()
        proc = subprocess.run(command, preexec_fn=enter, stdin=subprocess.DEVNULL, capture_output=True, **kw)
        wall = time.perf_counter() - began
        if self.group:
            cpu = self._read() - start_cpu
        else:
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return wall, cpu, proc.returncode

    def close(self) -> None:
        if self.group:
            try:
                self.group.rmdir()
            except OSError:
                pass


_WARM_STATUS = ("import json\n"
                "try:\n"
                "    from coursekit.feedback import _warm_request, warm_grader_socket\n"
                "except ImportError:\n"
                "    print('null')\n"
                "else:\n"
                "    print(json.dumps(_warm_request(warm_grader_socket(), {'op': 'status'}, 30)))\n")


def _warm_grader_status(tree, env) -> dict | None:
    """The status of the warm grader the check line of `tree` with `env` asks (None: none)."""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", _WARM_STATUS], cwd=tree, env=env, capture_output=True, text=True)
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return None


def _warm_grader_ready(tree, env, timeout: float = 120.0) -> None:
    """Wait until that warm grader has its worker for the next check (at once where none runs),
    as a student reading the last report gives it time to."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _warm_grader_status(tree, env)
        if status is None or status.get("error") or status.get("ready"):
            return
        time.sleep(0.2)


def _stop_warm_grader(tree, env) -> None:
    """Take that warm grader's socket away and wait for it to leave (it does within seconds)."""
    import subprocess

    status = _warm_grader_status(tree, env)
    if not status or not status.get("pid"):
        return
    subprocess.run([sys.executable, "-c", "from coursekit.feedback import warm_grader_socket; "
                    "warm_grader_socket().unlink(missing_ok=True)"], cwd=tree, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and os.path.exists(f"/proc/{status['pid']}"):
        time.sleep(0.2)


def _course_copy(commit: str, folder):
    """`git archive` of `commit` unpacked in `folder`, gradeable from there (see below)."""
    import subprocess

    from ..paths import ROOT

    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    _let_a_copy_import_its_coursekit(folder)
    return folder


def _let_a_copy_import_its_coursekit(tree) -> None:
    """Before 8690d04 (issue 26), the sandbox's worker found `coursekit` only where the environment's
    editable install points (this checkout's), which a copy of the course elsewhere does not show it:
    graded from such a copy, every part that uses coursekit scored 0, and ran fewer checks than it
    does in place. The copy's worker is given its own folder first on its path, as 8690d04 does;
    nothing else of the old tree changes."""
    from pathlib import Path

    worker = Path(tree) / "autograder" / "worker" / "main.py"
    if not worker.exists() or "COURSE_PACKAGE" in (Path(tree) / "autograder" / "sandbox.py").read_text():
        return  # a tree laid out after issue 28, or one with the fix
    text = worker.read_text()
    anchor = "    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
    if text.count(anchor) != 1:
        raise RuntimeError(f"{worker} is not the worker this patch knows")
    worker.write_text(text.replace(anchor, anchor + f"    sys.path.insert(1, {str(tree)!r})  # bench: see above\n"))


def bench_feedback_latency(units=None, repeats: int = 2, before: str | None = BEFORE, log=print) -> dict:
    """The check line's time, from its start to its answer, per unit: one cheap part and the
    whole notebook, on the reference and on a wrong answer, cold (the first check of that course
    tree in this run) and warm (the median of `repeats` more), for this tree and for `before`
    (a copy of that commit, graded by the same Python), side by side; and the CPU seconds of every
    process one check starts. What is timed is the process the check line starts and waits for
    (`python -m coursekit.feedback UNIT PART SNAPSHOT ANSWER`: it grades with the course's own
    graders, as a clone of the course does with no service set up); the line's polling adds
    at most 0.2 s."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from ..paths import ROOT

    units = list(units or LATENCY_CASES)
    trees = {"after": ROOT}
    scratch = Path(tempfile.mkdtemp(prefix="feedback-latency-"))
    meter = _CpuMeter(f"feedback-latency-{os.getpid()}")
    try:
        if before:
            trees = {"before": _course_copy(before, scratch / "before"), "after": ROOT}
        log(f"CPU seconds measured with {meter.how}; {repeats} warm repeats; before = {before or '(not run)'}")
        rows = []
        for unit in units:
            part, correct, wrong = LATENCY_CASES[unit]
            # The whole notebook of the reference too: issue 27's measure of one whole grading.
            for asked, answers in ((part, (correct, wrong)), ("all", (REFERENCE, correct, wrong))):
                for answer_name in answers:
                    row = {"unit": unit, "part": asked, "answer": answer_name}
                    for label, tree in trees.items():
                        times, cpus, score = [], [], None
                        # One student's cache (so one warm grader, where the tree has one) per row:
                        # its first check starts the grader, the next ones find it.
                        home = Path(tempfile.mkdtemp(prefix=f"{label}-{unit}-", dir=scratch))
                        env = {k: v for k, v in os.environ.items()
                               if k not in ("COURSE_FEEDBACK_URL", "COURSE_FEEDBACK_TOKEN")}
                        env.update(PYTHONPATH=str(tree), XDG_CACHE_HOME=str(home / "cache"),
                                   XDG_CONFIG_HOME=str(home / "config"), MPLBACKEND="Agg")
                        for attempt in range(1 + repeats):
                            # a file of its own each time: the line would answer an unchanged one from its cache
                            snapshot = _snapshot(unit, answer_name, home, attempt, tree)
                            out = home / f"answer-{attempt}.json"
                            counted = meter.reading()
                            wall, _, _ = meter.run([sys.executable, "-m", "coursekit.feedback", unit, asked,
                                                    str(snapshot), str(out)], cwd=tree, env=env)
                            # A check's CPU includes its share of the warm grader's work: the worker
                            # it starts for the next check, after the answer (counted until ready).
                            _warm_grader_ready(tree, env)
                            cpus.append(meter.reading() - counted)
                            try:
                                answer = json.loads(out.read_text())
                                score = f"{answer['report']['score']:g}/{answer['report']['max_score']:g}"
                            except (OSError, ValueError, KeyError):
                                score = "no report"
                            times.append(wall)
                        _stop_warm_grader(tree, env)
                        row[label] = {"cold": times[0], "warm": statistics.median(times[1:]) if repeats else None,
                                      "cold_cpu": cpus[0], "cpu": statistics.median(cpus[1:] or cpus),
                                      "score": score}
                    rows.append(row)
                    cells = "  ".join(f"{label}: cold {row[label]['cold']:5.1f} s ({row[label]['cold_cpu']:5.1f} "
                                      f"CPU s), warm {row[label]['warm'] or 0:5.1f} s ({row[label]['cpu']:5.1f} "
                                      f"CPU s) {row[label]['score']}" for label in trees)
                    log(f"{unit:18s} {asked:22s} {answer_name:34s} {cells}")
        return {"rows": rows, "cpu_measured_with": meter.how}
    finally:
        meter.close()
        shutil.rmtree(scratch, ignore_errors=True)


BENCHES["feedback-latency"] = bench_feedback_latency


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHES:
        print(f"usage: python3 course.py bench {{{','.join(BENCHES)}}}")
        return 2
    if argv[0] == "grading":
        import argparse

        parser = argparse.ArgumentParser(prog="python3 course.py bench grading")
        parser.add_argument("--students", type=int, default=40)
        parser.add_argument("--units", default="01_attention,02_masking,03_multihead")
        parser.add_argument("--workers", type=int, default=2)
        args = parser.parse_args(argv[1:])
        bench_grading(args.students, tuple(args.units.split(",")), args.workers)
        return 0
    if argv[0] == "load":
        import argparse

        parser = argparse.ArgumentParser(prog="python3 course.py bench load")
        parser.add_argument("--units", default=None, help="comma-separated (default: every unit)")
        parser.add_argument("--at-once", type=int, default=4)
        parser.add_argument("--busy-per-core", type=int, default=4)
        parser.add_argument("--rounds", type=int, default=2)
        parser.add_argument("--workers", type=int, default=4)
        args = parser.parse_args(argv[1:])
        result = bench_load(args.units.split(",") if args.units else None, args.at_once, args.busy_per_core,
                            args.rounds, args.workers)
        return 0 if result["full"] == result["total"] else 1
    if argv[0] == "feedback":
        import argparse

        parser = argparse.ArgumentParser(prog="python3 course.py bench feedback")
        parser.add_argument("--students", type=int, default=25)
        parser.add_argument("--limit", type=int, default=10, help="checks per student per part (10: all graded)")
        parser.add_argument("--workers", type=int, default=None, help="grading workers (default: the cores)")
        parser.add_argument("--no-attacker", action="store_true", help="the class alone only")
        parser.add_argument("--slow", action="store_true",
                            help="only the slow notebook beside one classmate (2 workers unless --workers)")
        parser.add_argument("--unit", default="01_attention", help="the class's unit (01_attention, 07_flash_training)")
        parser.add_argument("--throughput", action="store_true",
                            help="only checks graded per minute (the class alone), units 01 and 07, this tree "
                                 "beside --before")
        parser.add_argument("--before", default=BEFORE, help="with --throughput: the commit compared ('' for none)")
        args = parser.parse_args(argv[1:])
        if args.throughput:
            rows = bench_feedback_throughput(before=args.before or None, students=args.students, workers=args.workers)
            return 1 if any(row["problems"] for row in rows.values()) else 0
        if args.slow:
            from .load_test import slow_notebook_scenario

            return 1 if slow_notebook_scenario(workers=args.workers or 2)["problems"] else 0
        return 1 if bench_feedback(args.students, args.limit, args.workers, not args.no_attacker,
                                   args.unit)["problems"] else 0
    if argv[0] == "feedback-latency":
        import argparse

        parser = argparse.ArgumentParser(prog="python3 course.py bench feedback-latency")
        parser.add_argument("--units", default=None, help="comma-separated (default: every unit)")
        parser.add_argument("--repeats", type=int, default=2, help="warm checks after the cold one")
        parser.add_argument("--before", default=BEFORE, help="the commit to compare with ('' for none)")
        args = parser.parse_args(argv[1:])
        bench_feedback_latency(args.units.split(",") if args.units else None, args.repeats, args.before or None)
        return 0
    if argv[0] == "tokenizer":
        import argparse

        parser = argparse.ArgumentParser(prog="python3 course.py bench tokenizer")
        parser.add_argument("--mb", type=float, default=2.0, help="megabytes of the corpus to time on")
        parser.add_argument("--vocab", type=int, default=4096)
        args = parser.parse_args(argv[1:])
        try:
            bench_tokenizer(args.mb, args.vocab)
        except MergesDiffer as err:
            print(f"FAILED: the two tokenizers do not learn the same merges: {err}")
            return 1
        return 0
    BENCHES[argv[0]]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
