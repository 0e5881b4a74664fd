"""Debug capabilities: LinearIR dumps (``dump``, ``serialize``; the text form is ``lowered.text_dump``), perf counters
(``perf_count``), the segfault detector's host side (``segfault``), all configured by ``config`` (SNIPPETS_*
variables or ``target_options["debug"]``). See docs/debug.md."""
