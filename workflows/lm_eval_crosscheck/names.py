"""What names `python -m workflows crosscheck-lm-eval`: in its error lines and in the reports it writes (a report
of another command is not replaced). Below the command's options (`command`) and its work, which all read it."""

COMMAND = "python -m workflows crosscheck-lm-eval"
