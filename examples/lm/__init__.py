"""A small GPT-style language model on the King James Bible, and the ways to split it over ranks
(examples/parallel_lm.py)."""
