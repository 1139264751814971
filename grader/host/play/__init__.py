"""`grade --play`: the learner's model and GPT-2 read the text the learner types, side by side, in a local page."""
