"""Studies: what a user runs the one-run pipeline (pipeline.py) for, many runs at a time:
`compare` (variants of a workload side by side), `sweep` (a grid of overrides), `search`
(the tiling tuner), `inference` (a model's request, step by step, with `layer_steps`,
`inference_report` and `inference_compare`), `serving` (a stream of requests through a
batching engine) and `outputs` (the files their commands write). They import the pipeline
and the layers under it, never the other way.
"""
