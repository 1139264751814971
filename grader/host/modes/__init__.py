"""What a learner runs beside a grading: `grade --watch`, `--hint` and `--show`."""
