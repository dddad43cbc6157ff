"""Reproducible benchmarks behind the README's claims (issue #8).

`quality` scores chunkers on the Chroma chunking evaluation; `speed` (to come)
times parsing, chunking, embedding and retrieval. `manage.py kb_bench` runs
them; both need only the packages in requirements-bench.txt.
"""
