"""`memlint snapshot SNAPSHOT.pickle [PATHS]`: a user's own memory snapshot, read and attributed.

A long job cannot run under `memlint verify`, but it can dump the CUDA allocator's history
(`torch.cuda.memory._record_memory_history()`, then `torch.cuda.memory._dump_snapshot(path)`).
This reads that file without a GPU and without torch, finds the peak, names the lines of the
user's files that allocated what was alive then, and the memlint findings at or around them.

    load.py     the pickle read as plain data only (no code runs), gzip or not
    sources.py  recorded file names matched to the user's files here
    peak.py     per device: the peak, and what was alive then, by line of the user's files
    cli.py      arguments, linting the files named, text and JSON
"""
