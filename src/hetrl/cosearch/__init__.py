"""Agent and accelerator co-search (A3C-S)."""
