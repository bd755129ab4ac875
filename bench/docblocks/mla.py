"""MLA's blocks (rung 17's decode on the latent cache, rung 16's 192/128 prefill), each from one run
folder of bench/studies/mla_decode.sh (gpu=<gpu>/mla):

  mla-decode   the mla-decode family: per shape rung 17's time, TFLOP/s and GB/s beside the two
               floors (the folder's ceilings.json: FLOPs / tensor rate, bytes / HBM rate) and SDPA on
               the decompressed cache (torch_mla.json, its fastest backend); optional filters
               heads=, sq=, batch=, sk= (comma-separated);
  mla-prefill  the mla-prefill family: rung 16's TFLOP/s at head_dim 192 / 128 beside SDPA's fastest
               backend that ran the shape, the forward pass;
  mla-prefill-backward  the same for the backward pass (rung 16's backward entry);
  mla-layer    one DeepSeek-V3 decode layer end to end (torch_mla_layer.json): the ladder's way
               (absorbed query, rung 17 through flash_mla_with_kvcache) against SDPA's on the
               decompressed cache, per layer and attention alone, with each cache's size.

A folder that does not exist, or lacks the files, gives the block's "not in a committed run yet"
line with the command that measures it."""

import results_io
import report_tables
from .core import Missing, generator, ints, measured_line, results_folder

MLA_COMMAND = "bench/studies/mla_decode.sh build/release/bin bench/results/<gpu>/mla"


def mla_run(ctx, gpu, what):
    """(Results, records of the MLA families, ladder's and PyTorch's, errors kept) of folder @p gpu."""
    res = results_folder(ctx, gpu, what, MLA_COMMAND)
    if not res.has("ladder_bench.json"):
        raise Missing("%s (ladder_bench.json) in bench/results/%s" % (what, res.gpu), MLA_COMMAND)
    recs = []
    for name in ("ladder_bench.json", "torch_mla.json"):
        if res.has(name):
            recs += results_io.load_records(res.path(name))
    return res, [r for r in recs if r["family"] in results_io.MLA_FAMILIES]


def floors(res):
    """results_io.rate_ceilings of the folder: its ceilings.json, else the run's datasheet peaks."""
    ceilings = results_io.load_ceilings(res.path("ceilings.json")) if res.has("ceilings.json") else None
    return results_io.rate_ceilings(res.ctx, ceilings)


@generator("mla-decode")
def gen_mla_decode(ctx, gpu=None, heads="", sq="", batch="", sk=""):
    """The mla-decode family of one run: per (heads, seqlen_q, batch, seqlen_k) rung 17's time,
    TFLOP/s and GB/s beside the floors (FLOPs / the tensor ceiling, bytes / the HBM ceiling, from
    the folder's ceilings.json) and SDPA on the decompressed cache (its fastest backend), with the
    speedup; heads=, sq=, batch=, sk= keep some rows."""
    res, recs = mla_run(ctx, gpu, "the mla-decode family")
    f = floors(res)
    header, rows = report_tables.mla_decode_table(recs, f, ints(heads), ints(sq), ints(batch), ints(sk))
    if not rows:
        raise Missing("rung 17 in the mla-decode family in bench/results/%s" % res.gpu, MLA_COMMAND)
    out = results_io.markdown_table(header, rows) + "\n\n" + report_tables.mla_decode_floor_note(f)
    refused = report_tables.torch_refusals(recs, "mla-decode")
    if refused:
        out += " SDPA backends that did not run: %s." % refused
    return out + "\n\n" + measured_line(res, ", %s, pages of 64 keys" % res.ctx.get("dtype", "fp16"))


def _prefill_block(ctx, gpu, family):
    """The table of @p family (mla-prefill or mla-prefill-backward) of one run: per causal and
    seqlen, each ladder entry's TFLOP/s at head_dim 192 (V 128) beside SDPA's fastest backend that
    ran the shape, and the ratio. The entries: the rungs (the forward), the backward entries
    (`N[backward]`; their ablations stay in the run's report)."""
    res, recs = mla_run(ctx, gpu, "the %s family" % family)
    recs = [r for r in recs if r["family"] == family]
    ladder = sorted({r["rung"] for r in recs if r["source"] == "ladder" and not r["error"]
                     and (r["rung"].endswith("[backward]") if family.endswith("backward")
                          else results_io.is_main(r["rung"]))},
                    key=lambda l: results_io.rung_order([l]))
    if not ladder:
        raise Missing("a rung in the %s family in bench/results/%s" % (family, res.gpu), MLA_COMMAND)
    rows = []
    for r in sorted((r for r in recs if r["rung"] in ladder and not r["error"]),
                    key=lambda r: (r["causal"], r["seqlen_q"], r["rung"])):
        t = report_tables.best_torch(recs, dict(family=family, seqlen_q=r["seqlen_q"], causal=r["causal"]))
        rows.append(["yes" if r["causal"] else "no", results_io.seqlen_text(r["seqlen_q"])]
                    + (["`%s`" % r["rung"]] if len(ladder) > 1 else [])
                    + [results_io.fmt_value(r["tflops"]),
                       "%s (%s)" % (results_io.fmt_value(t["tflops"]), report_tables.backend_of(t["rung"])) if t else "—",
                       results_io.fmt_ratio(t["ms"] / r["ms"]) if t else "—"])
    one = next(r for r in recs if r["rung"] in ladder)
    header = ["causal", "N"] + (["rung"] if len(ladder) > 1 else []) + [
        "`%s` TFLOP/s" % ladder[0] if len(ladder) == 1 else "TFLOP/s",
        "SDPA TFLOP/s (fastest backend)", "speedup"]
    what = report_tables.MLA_PREFILL_NOTES[family]
    note = ("Head_dim %d, V and O %d, %d heads, batch x seqlen = %d tokens; TFLOP/s = 2 x pairs x (%d + %d)%s, "
            "unmasked pairs only; speedup = SDPA's time / the rung's. %s." % (
                one["head_dim"], one["head_dim_v"], one["heads_q"], one["batch"] * one["seqlen_q"], one["head_dim"],
                one["head_dim_v"], " x 2.5" if family.endswith("backward") else "", what[0].upper() + what[1:]))
    refused = report_tables.torch_refusals(recs, family)
    if refused:
        note += " SDPA backends that did not run: %s." % refused
    return results_io.markdown_table(header, rows) + "\n\n" + note + "\n\n" + measured_line(
        res, ", %s" % res.ctx.get("dtype", "fp16"))


@generator("mla-prefill")
def gen_mla_prefill(ctx, gpu=None):
    """The mla-prefill family of one run: per causal and seqlen, each ladder entry's TFLOP/s at head_dim
    192 (V 128) beside SDPA's fastest backend that ran the shape, and the ratio; the forward pass."""
    return _prefill_block(ctx, gpu, "mla-prefill")


@generator("mla-prefill-backward")
def gen_mla_prefill_backward(ctx, gpu=None):
    """The mla-prefill-backward family of one run, as gen:mla-prefill: the backward pass alone."""
    return _prefill_block(ctx, gpu, "mla-prefill-backward")


LAYER_COMMAND = MLA_COMMAND  # its step 3: bench/pytorch/torch_mla_layer.py


@generator("mla-layer")
def gen_mla_layer(ctx, gpu=None):
    """One DeepSeek-V3 MLA decode layer end to end (torch_mla_layer.json): the ladder's way (absorbed
    query, rung 17 on the latent cache) and SDPA's on the decompressed cache, per layer and attention
    alone, with each cache's bytes per key and per layer."""
    res = results_folder(ctx, gpu, "torch_mla_layer.json", LAYER_COMMAND)
    if not res.has("torch_mla_layer.json"):
        raise Missing("torch_mla_layer.json in bench/results/%s" % res.gpu, LAYER_COMMAND)
    j = res.json("torch_mla_layer.json")
    ms, c = j.get("ms", {}), j["cache"]
    if "sdpa_layer" not in ms:
        raise Missing("the SDPA layer's time in bench/results/%s/torch_mla_layer.json" % res.gpu, LAYER_COMMAND)

    def cell(name):
        return "%.3f" % ms[name] if name in ms else "—"

    rows = [["the ladder: absorbed query, rung 17 on the latent cache", cell("ladder_layer"), cell("ladder_attention"),
             "%d" % c["latent_bytes_per_key"], "%.2f" % (c["latent_bytes"] / 1e9)],
            ["SDPA (%s) on the decompressed cache" % report_tables.backend_of("torch_" + j.get("sdpa_backend", "?")),
             cell("sdpa_layer"), cell("sdpa_attention"), "%d" % c["decompressed_bytes_per_key"],
             "%.2f" % (c["decompressed_bytes"] / 1e9)]]
    header = ["way", "layer ms", "attention ms", "cache bytes per key", "cache per layer (GB)"]
    m = j["model"]
    text = ("One decode step of one layer at DeepSeek-V3's sizes (%d heads, hidden %d, q_lora_rank %d, kv_lora_rank %d, "
            "rope %d, nope %d, v %d; random bf16 weights; norms and RoPE's rotation left out), batch %d, %s keys per "
            "sequence: the input projections, the new key into the cache, attention, the output projection."
            % (m["heads"], m["hidden"], m["q_lora_rank"], m["kv_lora_rank"], m["qk_rope_head_dim"],
               m["qk_nope_head_dim"], m["v_head_dim"], j["batch"], results_io.seqlen_text(j["seqlen_k"])))
    if "layer_speedup" in j:
        text += (" The ladder's layer is %s SDPA's (attention alone: %s); the cache is %.0f× smaller. The two "
                 "layers' outputs differ by %.1e (relative Frobenius)." % (
                     results_io.fmt_ratio(j["layer_speedup"]) + " faster than" if j["layer_speedup"] >= 1 else
                     results_io.fmt_ratio(1 / j["layer_speedup"]) + " slower than",
                     results_io.fmt_ratio(j["attention_speedup"]), c["decompressed_bytes"] / c["latent_bytes"],
                     j.get("ladder_vs_sdpa_rel_fro", float("nan"))))
    else:
        text += " The ladder's way did not run: %s." % j.get("skipped", {}).get("ladder", "?")
    text += (" SDPA's attention alone per backend: %s. Medians of %d calls (L2 flushed before each), %d rounds in "
             "turn. %s, %s, commit `%s`, PyTorch %s." % (
                 ", ".join("%s %.3f ms" % (report_tables.backend_of("torch_" + k), v)
                           for k, v in sorted(j.get("sdpa_backends_ms", {}).items())),
                 j["iters"], j["repeats"], j["device"]["name"], j["date"][:10], str(j.get("git_sha", "?"))[:7],
                 j.get("versions", {}).get("torch", "?")))
    return results_io.markdown_table(header, rows) + "\n\n" + text
