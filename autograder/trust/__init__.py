"""The trust line: everything that reads, runs or shows a student's code, and nothing else.

A security review reads this folder. `sandbox` is the jail (bubblewrap, limits, measured from
outside); `worker/` is the process inside it that runs one submission; `student` is the
grader's side of that worker (a submission's functions, called as data over a channel);
`kernel` is nbgrader's kernel, run in the sandbox; `inert` makes what a notebook shows safe to
open; `submission` reads a notebook without running it; `budget` is what one submission may
spend; `watch` holds the instruments used on trusted code only (never on a student's).
Nothing here imports the engine, the units or anything above them."""
