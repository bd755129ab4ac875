"""The name ``flash_attn`` bound to flashladder, so that FlashAttention 2's own test file imports the
package in its place (bench/studies/fa_tests/run.py). Only names: every call goes to flashladder
unchanged, so what the test file finds is what a user of that API finds."""

from flashladder import (  # noqa: F401
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)
