"""Side by side: the comparison rule, the noise between runs, in-run estimates, and the
run loader that compare and report share."""
