#!/bin/bash
# Rung 16's backward sweep (bench/results/<gpu>/rung16/bwd-sweep/): bench/studies/rung16_sweep.sh's
# backward grid. usage: bench/studies/rung16_bwd_sweep.sh BIN_DIR OUT_DIR
exec "$(dirname "$0")/rung16_sweep.sh" "$1" "$2" backward
