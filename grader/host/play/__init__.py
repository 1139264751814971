"""The playground (`grade --play`): the learner's package and GPT-2 on text the learner types, side by side.

`session` is the backend the page calls (`Playground`); `gpt2` the builder-side process that runs GPT-2 on the text;
`worker` the learner's side, confined as a check is; `entry` the typed text's cases as a reference entry; `answers` the
answer's parts computed from both, in NumPy.
"""
