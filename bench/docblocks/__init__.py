"""The generated blocks of the docs; bench/docgen.py is the command line.

core.py holds the markers, the results and context objects, the generator registry, the helpers
every family shares and --check/--write/--list; each other module registers the generators of one
family. Importing the package imports every family, so GENERATORS is complete."""

from . import backward, core, decode, fp8, ladder, pytorch, ring  # each registers its generators
from .core import GENERATORS, main

__all__ = ["GENERATORS", "main", "core", "ladder", "decode", "backward", "fp8", "ring", "pytorch"]
