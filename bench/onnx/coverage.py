"""Which PyTorch functions and modules reach a kiln training step through ONNX.

Each case is a small module (its input times a learned scalar, so that it
has a parameter) exported with the TorchScript exporter (opset 17) or the
torch.export one (its default opset), imported with `kiln import --loss=mse`
and checked with `kiln gradcheck` (the compiled step's gradients against
finite differences). It prints one line per case: ok, the exporter's own
failure, kiln import's error, or the gradient check's.

    PATH=build/bin:$PATH python3 bench/onnx/coverage.py torchscript|dynamo|dynamo23 [CASE...]

dynamo23 is the torch.export exporter at opset 23, where it writes
F.scaled_dot_product_attention as ONNX's Attention.

A reference for bench/RESULTS.md, not a test: it takes a few minutes, and
the exporters' failures are PyTorch's.
"""
import os
import subprocess
import sys
import tempfile
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")


class M(nn.Module):
    def __init__(s, f, *mods):
        super().__init__()
        s.f = f
        s.mods = nn.ModuleList(mods)
        s.w = nn.Parameter(torch.ones(1))

    def forward(s, x):
        return s.f(s, x * s.w)


idx = torch.tensor([2, 0, 1])
CASES = {
 "atan2": (M(lambda s,x: torch.atan2(x, x*0.5+1)), (4,8)),
 "prod": (M(lambda s,x: torch.prod(x, dim=1)), (4,8)),
 "prod_wide": (M(lambda s,x: torch.prod(1 + 0.1 * torch.tanh(x), dim=1)), (4,300)),
 "cumprod": (M(lambda s,x: torch.cumprod(x, dim=1)), (4,8)),
 "roll": (M(lambda s,x: torch.roll(x, 2, dims=1)), (4,8)),
 "flip": (M(lambda s,x: torch.flip(x, dims=[1])), (4,8)),
 "sort": (M(lambda s,x: torch.sort(x, dim=1)[0]), (4,8)),
 "sort_wide": (M(lambda s,x: torch.sort(x, dim=1)[0] * torch.linspace(0, 1, 300)), (4,300)),
 "topk_wide": (M(lambda s,x: x.topk(40, dim=1).values), (4,300)),
 "unfold": (M(lambda s,x: F.unfold(x, 3, padding=1)), (2,3,6,6)),
 "fold": (M(lambda s,x: F.fold(x, (4,4), 2)), (2,12,9)),
 "pixel_unshuffle": (M(lambda s,x: F.pixel_unshuffle(x, 2)), (2,3,4,4)),
 "enc_layer": (M(lambda s,x: s.mods[0](x), nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)), (2,5,16)),
 "mha": (M(lambda s,x: s.mods[0](x,x,x)[0], nn.MultiheadAttention(16, 4, batch_first=True)), (2,5,16)),
 "gru_bi": (M(lambda s,x: s.mods[0](x)[0], nn.GRU(8, 6, batch_first=True, bidirectional=True, num_layers=2)), (2,5,8)),
 "lstm_proj": (M(lambda s,x: s.mods[0](x)[0], nn.LSTM(8, 6, batch_first=True, proj_size=3)), (2,5,8)),
 "instnorm": (M(lambda s,x: s.mods[0](x), nn.InstanceNorm2d(3, affine=True)), (2,3,5,5)),
 "normalize": (M(lambda s,x: F.normalize(x, dim=1)), (4,8)),
 "interp_bicubic": (M(lambda s,x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False)), (2,3,4,4)),
 "interp_area": (M(lambda s,x: F.adaptive_avg_pool2d(x, (3,3))), (2,3,7,7)),
 "adaptive_max": (M(lambda s,x: F.adaptive_max_pool2d(x, (2,2))), (2,3,6,6)),
 "conv1d": (M(lambda s,x: s.mods[0](x), nn.Conv1d(3, 4, 3, padding=1)), (2,3,10)),
 "conv3d": (M(lambda s,x: s.mods[0](x), nn.Conv3d(3, 4, 3, padding=1)), (2,3,5,5,5)),
 "convT1d": (M(lambda s,x: s.mods[0](x), nn.ConvTranspose1d(3, 4, 3, stride=2)), (2,3,10)),
 "maxpool1d": (M(lambda s,x: F.max_pool1d(x, 2)), (2,3,10)),
 "avgpool3d": (M(lambda s,x: F.avg_pool3d(x, 2)), (2,3,4,4,4)),
 "dilated": (M(lambda s,x: s.mods[0](x), nn.Conv2d(3, 4, 3, dilation=2, padding=2)), (2,3,8,8)),
 "depthwise": (M(lambda s,x: s.mods[0](x), nn.Conv2d(4, 4, 3, groups=4, padding=1)), (2,4,8,8)),
 "silu": (M(lambda s,x: F.silu(x)), (4,8)),
 "logsigmoid": (M(lambda s,x: F.logsigmoid(x)), (4,8)),
 "hardtanh": (M(lambda s,x: F.hardtanh(x)), (4,8)),
 "glu": (M(lambda s,x: F.glu(x, dim=1)), (4,8)),
 "cosine_sim": (M(lambda s,x: F.cosine_similarity(x, x.flip(0), dim=1)), (4,8)),
 "cdist": (M(lambda s,x: torch.cdist(x, x)), (4,8)),
 "triu": (M(lambda s,x: torch.triu(x)), (8,8)),
 "var": (M(lambda s,x: torch.var(x, dim=1)), (4,8)),
 "std_mean": (M(lambda s,x: x.std(dim=1, keepdim=True) + x.mean()), (4,8)),
 "logsumexp": (M(lambda s,x: torch.logsumexp(x, dim=1)), (4,8)),
 "amax": (M(lambda s,x: torch.amax(x, dim=1) - torch.amin(x, dim=1)), (4,8)),
 "norm": (M(lambda s,x: torch.linalg.norm(x, dim=1)), (4,8)),
 "clamp_min": (M(lambda s,x: x.clamp(min=0.1)), (4,8)),
 "masked_fill": (M(lambda s,x: x.masked_fill(x > 0.5, -1.0)), (4,8)),
 "bmm": (M(lambda s,x: torch.bmm(x, x.transpose(1,2))), (2,4,8)),
 "baddbmm": (M(lambda s,x: torch.baddbmm(x[:, :, :4], x, x.transpose(1,2)[:, :, :4])), (2,4,8)),
 "chunk": (M(lambda s,x: sum(torch.chunk(x, 4, dim=1))), (4,8)),
 "repeat_interleave": (M(lambda s,x: x.repeat_interleave(2, dim=1)), (4,8)),
 "expm1": (M(lambda s,x: torch.expm1(x) + torch.log1p(x.abs())), (4,8)),
 "erfinv": (M(lambda s,x: torch.erfinv(x.tanh()*0.9)), (4,8)),
 "where_scalar": (M(lambda s,x: torch.where(x > 0, x, 0.1 * x)), (4,8)),
 "rms_norm": (M(lambda s,x: F.rms_norm(x, (8,))), (4,8)),
 "group_norm": (M(lambda s,x: s.mods[0](x), nn.GroupNorm(2, 4)), (2,4,5,5)),
 "layer_norm_nobias": (M(lambda s,x: s.mods[0](x), nn.LayerNorm(8, bias=False)), (4,8)),
 "sdpa_causal": (M(lambda s,x: F.scaled_dot_product_attention(x, x, x, is_causal=True)), (2,2,5,8)),
 "max_dim": (M(lambda s,x: x.max(dim=1)[0]), (4,8)),
 "argsort": (M(lambda s,x: x.gather(1, x.argsort(dim=1))), (4,8)),
 "pow_tensor": (M(lambda s,x: x.abs().pow(x)), (4,8)),
 "remainder": (M(lambda s,x: torch.remainder(x, 0.7)), (4,8)),
 "fmod": (M(lambda s,x: torch.fmod(x, 0.7)), (4,8)),
 "trunc": (M(lambda s,x: torch.trunc(x*3) + x), (4,8)),
 "softmin": (M(lambda s,x: F.softmin(x, dim=1)), (4,8)),
 "gumbel_free_logsoftmax": (M(lambda s,x: F.log_softmax(x, dim=0)), (4,8)),
 "mish_hs": (M(lambda s,x: F.mish(x) + F.hardswish(x) + F.hardsigmoid(x)), (4,8)),
 "upsample_nearest3d": (M(lambda s,x: F.interpolate(x, scale_factor=2)), (1,2,2,3,3)),
 "pad_reflect": (M(lambda s,x: F.pad(x, (1,2,1,0), mode="reflect")), (2,3,5,5)),
 "pad_circular": (M(lambda s,x: F.pad(x, (1,2,1,0), mode="circular")), (2,3,5,5)),
 "diag": (M(lambda s,x: torch.diagonal(x, dim1=0, dim2=1)), (8,8)),
 "outer": (M(lambda s,x: torch.outer(x[0], x[1])), (4,8)),
 "tril_mask": (M(lambda s,x: x.masked_fill(torch.ones(8,8,dtype=torch.bool).triu(1), float('-inf')).softmax(-1)), (8,8)),
 "meshgrid_affine_grid": (M(lambda s,x: F.grid_sample(x, F.affine_grid(torch.tensor([[[0.9,0.1,0.0],[0.0,1.1,0.1]]]).repeat(2,1,1), (2,3,4,4), align_corners=False), align_corners=False)), (2,3,4,4)),

 "trilinear": (M(lambda s,x: F.interpolate(x, scale_factor=2, mode="trilinear")), (1,2,3,3,3)),
 "adaptive_avg1d": (M(lambda s,x: F.adaptive_avg_pool1d(x, 4)), (2,3,8)),
 "adaptive_max1d": (M(lambda s,x: F.adaptive_max_pool1d(x, 4)), (2,3,8)),
 "adaptive_avg3d": (M(lambda s,x: F.adaptive_avg_pool3d(x, 2)), (1,2,4,4,4)),
 "index_select": (M(lambda s,x: torch.index_select(x, 1, idx)), (4,8)),
 "scatter_reduce_amax": (M(lambda s,x: torch.zeros(4,3).scatter_reduce(1, torch.tensor([[0,1,2,0,1,2,0,1]]*4), x, "amax", include_self=False)), (4,8)),
 "scatter_reduce_prod": (M(lambda s,x: torch.ones(4,3).scatter_reduce(1, torch.tensor([[0,1,2,0,1,2,0,1]]*4), x, "prod")), (4,8)),
 "scatter_reduce_mean": (M(lambda s,x: torch.zeros(4,3).scatter_reduce(1, torch.tensor([[0,1,2,0,1,2,0,1]]*4), x, "mean")), (4,8)),
 "one_hot_mul": (M(lambda s,x: x[:, :3] * F.one_hot(torch.tensor([0,2,1,1]), 3)), (4,8)),
 "pixel_shuffle": (M(lambda s,x: F.pixel_shuffle(x, 2)), (2,8,3,3)),
 "layer_norm_2d": (M(lambda s,x: F.layer_norm(x, (4,4))), (2,3,4,4)),
 "local_response": (M(lambda s,x: F.local_response_norm(x, 3)), (2,4,5,5)),
 "lp_pool": (M(lambda s,x: F.lp_pool2d(x, 2, 2)), (2,3,4,4)),
 "max_unpool_free_avg1d_ceil": (M(lambda s,x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)), (2,3,9)),
 "conv_transpose2d_groups": (M(lambda s,x: s.mods[0](x), nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2)), (2,4,4,4)),
 "bilinear": (M(lambda s,x: s.mods[0](x, x), nn.Bilinear(8, 8, 3)), (4,8)),
 "cross_entropy_smooth": (M(lambda s,x: F.cross_entropy(x, torch.tensor([1,2,0,3]), label_smoothing=0.1).reshape(1)), (4,8)),
 "kl_div": (M(lambda s,x: F.kl_div(F.log_softmax(x, 1), F.softmax(x.flip(1), 1), reduction="batchmean").reshape(1)), (4,8)),
 "huber": (M(lambda s,x: F.huber_loss(x, x.flip(0)).reshape(1)), (4,8)),
 "bce_logits": (M(lambda s,x: F.binary_cross_entropy_with_logits(x, torch.sigmoid(x.flip(0))).reshape(1)), (4,8)),
 "cumsum_rev": (M(lambda s,x: x.flip(1).cumsum(1).flip(1)), (4,8)),
 "std_unbiased": (M(lambda s,x: x.std(0)), (4,8)),
 "einsum_bilinear": (M(lambda s,x: torch.einsum("bi,bj->bij", x, x)), (4,8)),
 "topk_vals": (M(lambda s,x: x.topk(3, dim=1).values), (4,8)),
 "sort_desc": (M(lambda s,x: x.sort(dim=1, descending=True).values), (4,8)),
 "clamp_tensor": (M(lambda s,x: torch.clamp(x, min=x.mean(), max=x.max())), (4,8)),
 "glu3d": (M(lambda s,x: F.glu(x, -1)), (2,3,8)),
 "selu_celu_elu": (M(lambda s,x: F.selu(x) + F.celu(x) + F.elu(x, 0.5)), (4,8)),
 "hardshrink": (M(lambda s,x: F.hardshrink(x) + F.softshrink(x) + F.tanhshrink(x)), (4,8)),
 "rrelu_eval": (M(lambda s,x: F.rrelu(x, training=False)), (4,8)),
 "logaddexp": (M(lambda s,x: torch.logaddexp(x, x.flip(1))), (4,8)),
 "sigmoid_log": (M(lambda s,x: torch.log(torch.sigmoid(x))), (4,8)),
 "square_rsqrt": (M(lambda s,x: torch.rsqrt(x.square() + 1)), (4,8)),
 "maximum": (M(lambda s,x: torch.maximum(x, x.flip(0)) + torch.minimum(x, x.flip(1))), (4,8)),
 "gelu_tanh": (M(lambda s,x: F.gelu(x, approximate="tanh")), (4,8)),
 "embedding_maxnorm_free": (M(lambda s,x: s.mods[0](torch.tensor([[1,2],[3,0]])).sum() * x, nn.Embedding(5, 8)), (4,8)),
 "avgpool2d_divisor": (M(lambda s,x: F.avg_pool2d(x, 2, divisor_override=3)), (2,3,4,4)),
 "linspace_mul": (M(lambda s,x: x * torch.linspace(0, 1, 8)), (4,8)),
 "arange_mul": (M(lambda s,x: x * torch.arange(8).float()), (4,8)),
 "new_zeros_like": (M(lambda s,x: x + torch.zeros_like(x) + torch.ones_like(x)), (4,8)),
 "where_nan": (M(lambda s,x: torch.nan_to_num(torch.log(x))), (4,8)),
 "isclose_sum": (M(lambda s,x: x * (x.abs() < 0.5).float()), (4,8)),
 "atan2_flip": (M(lambda s,x: torch.atan2(x, x.flip(1))), (4,8)),
 "stft": (M(lambda s,x: torch.stft(x, 16, hop_length=4, window=torch.hann_window(16), return_complex=False)), (2,64)),
 "stft_magnitude": (M(lambda s,x: torch.stft(x, 16, hop_length=4, window=torch.hann_window(16), return_complex=True).abs()), (2,64)),
 "rfft_magnitude": (M(lambda s,x: torch.fft.rfft(x).abs()), (4,16)),
 "det": (M(lambda s,x: torch.linalg.det(x)), (3,4,4)),
 "affine_grid": (M(lambda s,x: F.affine_grid(x, (2,3,5,6), align_corners=False)), (2,2,3)),
 "max_unpool": (M(lambda s,x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2)), (2,3,6,6)),
 "logcumsumexp": (M(lambda s,x: torch.logcumsumexp(x, 1)), (4,8)),
 "quantile": (M(lambda s,x: torch.quantile(x, 0.3, dim=1)), (4,8)),
 "nanmean": (M(lambda s,x: torch.where(x > 1, float("nan"), x).nanmean(1)), (4,8)),
 "cdist_flip": (M(lambda s,x: torch.cdist(x, x.flip(1))), (2,5,3)),
 "group_norm_fn": (M(lambda s,x: F.group_norm(x, 2)), (2,4,3,3)),
 "embedding_bag": (M(lambda s,x: s.mods[0](torch.tensor([[1,2,4],[3,0,0]])) * x, nn.EmbeddingBag(5, 8, mode="mean")), (2,8)),
 "bernoulli_mask": (M(lambda s,x: x * torch.bernoulli(torch.full_like(x, 0.5))), (4,8)),
 "randn_like": (M(lambda s,x: x + 0.1 * torch.randn_like(x)), (4,8)),
 "sdpa_causal_qkv": (M(lambda s,x: F.scaled_dot_product_attention(x, x.flip(2), x * 0.5, is_causal=True)), (2,4,6,8)),
 "sdpa_mask": (M(lambda s,x: F.scaled_dot_product_attention(x, x.flip(2), x, attn_mask=torch.ones(6, 6).tril().bool())), (2,4,6,8)),
 "sdpa_gqa": (M(lambda s,x: F.scaled_dot_product_attention(x, x[:, :2], x[:, :2], enable_gqa=True)), (2,4,6,8)),
}


def main(exporter, names):
    torch.manual_seed(0)
    dynamo = exporter.startswith("dynamo")
    out = tempfile.mkdtemp(prefix="kiln-onnx-coverage-")
    failed = 0
    for name in names or list(CASES):
        module, shape = CASES[name]
        path = os.path.join(out, name + ".onnx")
        try:
            if dynamo:
                torch.onnx.export(module, (torch.randn(shape),), path, dynamo=True,
                                  **({"opset_version": 23} if exporter == "dynamo23" else {}))
            else:
                torch.onnx.export(module, (torch.randn(shape),), path, opset_version=17,
                                  dynamo=False)
        except Exception as e:  # the exporter's own refusal
            print(f"{name}: export failed: {str(e).splitlines()[0][:120]}")
            continue
        model = path.replace(".onnx", ".kiln")
        r = subprocess.run(["kiln", "import", path, "-o", model, "--loss=mse"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            failed += 1
            print(f"{name}: IMPORT " + (r.stderr.strip().splitlines() or ["?"])[-1][:240])
            continue
        g = subprocess.run(["kiln", "gradcheck", model], capture_output=True, text=True)
        if "gradcheck: PASS" in g.stdout:
            print(f"{name}: ok")
        else:
            failed += 1
            print(f"{name}: GRADCHECK " + (g.stdout + g.stderr).strip().splitlines()[-1][:200])
    print(f"{failed} of the exported cases failed in kiln")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("torchscript", "dynamo", "dynamo23"):
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
