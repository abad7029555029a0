"""What runs inside the sandbox, and the wire format both sides speak.

This folder is the only part of `autograder/` that the sandboxed worker can read (it is
bound read-only into the sandbox): `channel.py`, the data-only wire format, and
`main.py`, the loop that runs a submission's code and answers the grader's requests. It
holds no test, no reference and no answer, so reading it tells a student nothing.
"""
