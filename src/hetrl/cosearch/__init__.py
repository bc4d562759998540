"""Agent and accelerator co-search (A3C-S, issue 19): the search, its supernet and its hardware cost models."""
