"""nbgrader's side: the course's settings (`course`), the preprocessors that fill grade
cells from the hidden tests (`grades`), and the parallel class autograde (`autograde`)."""
