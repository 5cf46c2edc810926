"""Statistical tests, the exactness battery, mutants and harnesses."""
