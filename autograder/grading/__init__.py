"""One grading run: the pytest plugin the hidden tests run under (`plugin`), the trusted
process that runs them for one submission (`run`), its forked start (`forked`), the pool of
workers that grade many (`pool`), and the `check` command."""
