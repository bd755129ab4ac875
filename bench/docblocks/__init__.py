"""The generated blocks of the docs; bench/docgen.py is the command line.

core.py holds the markers, the results and context objects, the generator registry, the helpers
every family shares and --check/--write/--list; each other module registers the generators of one
family. Importing the package imports every family, so GENERATORS is complete."""

# each registers its generators
from . import (backward, core, decode, fp8, hopper_backward, ladder, masks, mla, persistent, pytorch, pytorch_runs,
               ring)
from . import figures  # registers the SVG figures (core.FIGURES), after the families
from .core import GENERATORS, main

__all__ = ["GENERATORS", "main", "core", "ladder", "decode", "backward", "fp8", "ring", "pytorch",
           "hopper_backward", "persistent", "masks", "mla", "pytorch_runs"]
