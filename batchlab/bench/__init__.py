"""``batchlab bench``: decode throughput vs B, batchlab's paths against mlx-lm.

    shapes.py    random-weight models with real checkpoints' shapes, built in memory
    engines.py   one timed run of l1 / BatchGenerator / generate_step
    measure.py   the sweep (warm-up, interleaved repeats) and its Result records
    roofline.py  weight bytes, the copy-bandwidth benchmark, the B=1 bound
    report.py    CSV (the source), Markdown, PNG and summary.md
    cli.py       the ``bench`` subcommand
"""
