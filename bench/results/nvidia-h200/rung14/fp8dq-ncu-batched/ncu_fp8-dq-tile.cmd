14_hopper_backward --variant fp8-dq-tile --dtype bf16 --batch 4 --seqlen 4096 --heads 16 --dim 128 --causal 1 --iters 1 --warmup 0 --check none --no-compare
