"""The class view behind `python -m grader.host.tools.class_report`: `inputs` reads every kind of result this grader
writes for a class into one record per learner, `tally` adds them up, `page` and `tables` write the HTML page,
the CSV and the Markdown summary."""
