"""The command layer, one room: the shared plumbing (:mod:`.common`), every flag declared
once (:mod:`.flags`), and one module per command, each holding its parser and ``main``:
:mod:`.run` (the search), :mod:`.train`, :mod:`.supernet`, :mod:`.report`, :mod:`.data`;
:mod:`.search` runs a checked plan for ``run`` and ``supernet --validate``. The console
scripts (``searchmaps-run``, ...) call these ``main``s; ``python -m searchmaps.<command>``
reaches them through thin shims. No library module imports this package, and importing it
imports nothing (the report's command never loads torch)."""
