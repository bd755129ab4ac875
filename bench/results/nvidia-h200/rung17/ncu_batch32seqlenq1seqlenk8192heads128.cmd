17_mla --batch 32 --seqlen-q 1 --seqlen-k 8192 --heads 128 --kv-heads 1 --dim 576 --dim-v 512 --v-in-k --dtype bf16 --iters 1 --warmup 0 --check none --no-compare --page-size 64
