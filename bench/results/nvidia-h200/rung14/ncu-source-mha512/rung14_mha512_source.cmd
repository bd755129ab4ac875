14_hopper_backward --dtype fp16 --batch 32 --seqlen 512 --heads 16 --kv-heads 16 --dim 128 --causal 0 --iters 1 --warmup 0 --check none --no-compare
