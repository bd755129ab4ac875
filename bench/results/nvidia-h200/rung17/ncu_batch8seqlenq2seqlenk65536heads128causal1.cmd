17_mla --batch 8 --seqlen-q 2 --seqlen-k 65536 --heads 128 --causal 1 --kv-heads 1 --dim 576 --dim-v 512 --v-in-k --dtype bf16 --iters 1 --warmup 0 --check none --no-compare --page-size 64
