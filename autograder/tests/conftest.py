"""The hidden graders' pytest set-up: everything comes from the grading plugin."""

