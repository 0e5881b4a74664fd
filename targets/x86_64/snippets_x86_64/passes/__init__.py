"""Passes of the x86-64 target (one class per module)."""
