"""`genbench run`: the benchmark's phases, its workload, repeats, the client's self-check,
the result document and its rendering."""
