14_hopper_backward --dtype bf16 --batch 2 --seqlen 4096 --heads 16 --kv-heads 4 --dim 128 --causal 1 --iters 1 --warmup 0 --check none --no-compare
