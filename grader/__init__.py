"""Grades a from-scratch GPT-2 against the real one, module by module."""

__version__ = "0.1.0"
