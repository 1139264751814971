"""GPT-2 small, rebuilt one module at a time."""
