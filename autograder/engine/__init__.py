"""The grading engine: what a unit declares (`spec`), grading one part (`grade`), the probe
API on both sides of the trust line (`probes`), naming a mistake from the catalogue
(`catalogue`), the copy checks (`originality`), comparing values (`compare`), the reference
solutions (`reference`, `weights`) and the words of results (`report`)."""
