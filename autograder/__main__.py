"""`python -m autograder <command> ...`: check, build, demo."""

import sys

USAGE = """usage:
  python -m autograder check <unit> <path> [--json]   grade a notebook or .py file
  python -m autograder build [--check]                regenerate quiz/grade cells and exercises/
  python -m autograder demo                           the instructor's loop on the sample class
  python -m autograder bench <what>                   benchmarks that print figures (attention, tokenizer, ...)
  python -m autograder train [--minutes M] [--device D]   unit 08's tokenizer and recipe on the standard library
  python -m autograder feedback <unit> <path> [--part P]  the hidden graders' report on a notebook, as JSON
  python -m autograder warm-grader <socket> [--unit U]  the check line's warm grader (coursekit.feedback starts it)
  python -m autograder feedback-server [<unit>...]    the feedback service for a class (see README.md)
  python -m autograder feedback-report <unit>         the mistakes a class made, from the service's records
  python -m autograder autograde <unit> [--workers N] [--students A,B] [--scheduler ADDRESS] [--feedback]
                                                      grade a class's submissions in parallel"""


def main(argv: list[str]) -> int:
    commands = {"check", "build", "demo", "bench", "train", "autograde", "feedback", "feedback-server",
                "feedback-report", "warm-grader"}
    if not argv or argv[0] not in commands:
        print(USAGE)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "check":
        from .grading.check import main as run
    elif command == "build":
        from .release.build import main as run
    elif command == "bench":
        from .tools.bench import main as run
    elif command == "train":
        from .tools.train import main as run
    elif command == "feedback":
        from .feedback.reports import main as run
    elif command == "warm-grader":
        from .feedback.warm_grader import main as run
    elif command == "feedback-server":
        from .feedback.service import main as run
    elif command == "feedback-report":
        from .feedback.class_mistakes import main as run
    elif command == "autograde":
        from .nbgrader.autograde import main as run
    else:
        from .tools.demo import main as run
    return run(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
