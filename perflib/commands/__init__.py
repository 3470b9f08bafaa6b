"""Sub-commands of `perflib`; each module registers one top-level command."""
