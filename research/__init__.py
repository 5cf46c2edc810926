"""Research and reproduction code of the speccheck checkout: NOT part of the installed package
(``pyproject.toml`` packages only ``speccheck*``), importable from the repository root.

- :mod:`research.reference`: mpmath golden values (mpmath is a test-only dependency);
- :mod:`research.claims`: the papers' theory claims checked against ``speccheck.theory``;
- :mod:`research.mcrs_research`: the MCRS research LPs (top-2, min-max, the max-conditioned bound);
- :mod:`research.mcrs_tables`: the MCRS gap and min-max tables (``theory/*.md``);
- :mod:`research.mcrs2_tables`: the MCRS-2 share table (``theory/mcrs2_share_table.md``);
- :mod:`research.rass_lp`, :mod:`research.hinge_lp`: the HiGHS quadrature LPs (cross-checks,
  the paper-sized benchmark baseline).

``speccheck reproduce`` regenerates the artefacts these write when run from a source checkout;
nothing under ``speccheck/`` imports this package (``tests/test_import_graph.py``).
"""
