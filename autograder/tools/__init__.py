"""The instructor's and developer's tools: the sample class (`demo`), benchmarks (`bench`),
unit 08's training run (`train`, `tokenized_corpus`) and the feedback service's load test
(`load_test`)."""
