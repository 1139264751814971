"""The class view behind `python -m grader.host.tools.class_report`: `gather` finds the result files and merges each
learner's, `reader` reads every kind of result this grader writes back into one record per learner, `tally` adds them
up, `page`, `tables` and `lms` write the HTML page, the CSV and Markdown summary, and the LMS gradebook."""
