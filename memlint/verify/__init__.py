"""The runtime verifier: runs code before and after each fix and checks what the rule claims.

`memlint verify SCRIPT|FIXTURES_DIR` (memlint.verify.cli). torch is imported only by the child
process (memlint/verify/child.py, run by path, importing nothing of memlint); the linter never
needs torch, and importing this package does not import it either.

    variants.py  what to compare: each fix alone, all fixes, or fixture before/after
    measure.py   one run in a fresh child process: timeout, process-group kill, its measurements
    child.py     the child: the script as __main__, seeded, measured (device peak or host RSS, time, grads)
    session.py   every program `repeat` times, interleaved; rows of judgements
    judge.py     verdicts: confirmed / refuted / inconclusive from medians and run-to-run spread
    report.py    text table and JSON
    plot.py      memory over time, before vs after (matplotlib, optional)
    cli.py       arguments and exit codes
"""
