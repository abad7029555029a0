"""`course.py build`: the student release from the solution notebooks, with its quiz cells
(`quizzes`), its grade and feedback cells (`gradecells`) and unit 06's pretrained checkpoint
(`pretrain`)."""
