#!/usr/bin/env python3
"""Every measured figure in the docs, generated from the committed runs under bench/results/.

    python3 bench/docgen.py --check [--bin BUILD/bin | --registry REGISTRY.json]
    python3 bench/docgen.py --write [--bin BUILD/bin | --registry REGISTRY.json]
    python3 bench/docgen.py --list

The command line of the package bench/docblocks/: its core (core.py) says how the generated
blocks work and holds PRIMARY, the results folder the docs quote; one module per family (ladder,
decode, backward, fp8, ring, pytorch) holds that family's generators.
"""

import sys

import docblocks  # bench/docblocks/: this script's folder is first on sys.path

if __name__ == "__main__":
    sys.exit(docblocks.main())
