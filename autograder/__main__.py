"""`python -m autograder <command> ...`: check, build, demo."""

import sys

USAGE = """usage:
  python -m autograder check <unit> <path> [--json]   grade a notebook or .py file
  python -m autograder build [--check]                regenerate quiz/grade cells and exercises/
  python -m autograder demo                           the instructor's loop on the sample class
  python -m autograder bench <what>                   benchmarks that print figures (generation, attention)
  python -m autograder train [--minutes M] [--device D]   train the course's GPT on the shipped corpus
  python -m autograder autograde <unit> [--workers N] [--students A,B] [--scheduler ADDRESS] [--feedback]
                                                      grade a class's submissions in parallel"""


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"check", "build", "demo", "bench", "train", "autograde"}:
        print(USAGE)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "check":
        from .cli import main as run
    elif command == "build":
        from .build import main as run
    elif command == "bench":
        from .bench import main as run
    elif command == "train":
        from .train import main as run
    elif command == "autograde":
        from .classgrading import main as run
    else:
        from .demo import main as run
    return run(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
