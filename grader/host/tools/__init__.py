"""The tools around grading: setting up, the stubs from the solutions, the learner release, the
notebooks, Classroom 50 and Gradescope bundles, batch grading and the class report."""
