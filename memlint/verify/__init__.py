"""The runtime verifier: runs code before and after each fix and checks what the rule claims.

`memlint verify SCRIPT|FIXTURES_DIR` (memlint.verify.cli). torch is imported only by the child
process (memlint/verify/child.py, run by path, importing nothing of memlint); the linter never
needs torch, and importing this package does not import it either.

    variants.py     what to compare: each fix alone, all fixes, or fixture before/after
    measure.py      one run in its own child process: timeout, tree kill, its measurements
    child.py        the child: the script as __main__, seeded, measured (device peak or host RSS,
                    time, gradient health, the allocator's history); also the fork server's loop
    forkserver.py   GPU runs forked from one process that imported torch once
    tree.py         a run's whole process tree, found and killed (setsid included)
    schedule.py     which runs go at once: --jobs, memory budget, timed runs alone
    session.py      every program `repeat` times, interleaved; rows of judgements
    judge.py        verdicts: confirmed / refuted / inconclusive from medians and run-to-run spread
    history.py      the allocator's history read: memory over time, lines alive at the peak
    attribution.py  where the peak is, before and after, and which finding points there
    report.py       text table and JSON
    plot.py         memory over time, before vs after (matplotlib, optional)
    cli.py          arguments and exit codes
"""
