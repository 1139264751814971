"""The tools around grading: setting up, the stubs from the solutions, the learner release, batch grading and the
class report (each platform's own tools are in its folder, grader/host/platforms/NAME/)."""
