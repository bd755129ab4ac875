"""fp64 references that more than one of the package's test scripts checks against (test_cpu.py,
test_gpu.py): imported from this folder, which is the scripts' own (sys.path[0])."""


def rope_reference(x, cos, sin, positions, interleaved):
    """fp64 x [b, s, h, d] with its first 2 cos.shape[1] channels rotated by the angles of rows
    positions [b, s] of cos and sin: pairs (2i, 2i + 1) as complex products (interleaved), else
    GPT-NeoX's x cos + rotate_half(x) sin; the other channels as they are."""
    import torch

    half = cos.shape[1]
    c = cos.double()[positions.long()][:, :, None, :]
    s = sin.double()[positions.long()][:, :, None, :]
    x = x.double()
    head = x[..., :2 * half]
    if interleaved:
        z = torch.view_as_complex(head.reshape(*head.shape[:-1], half, 2).contiguous())
        head = torch.view_as_real(z * torch.complex(c, s)).flatten(-2)
    else:
        head = (head * torch.cat((c, c), dim=-1) +
                torch.cat((-head[..., half:], head[..., :half]), dim=-1) * torch.cat((s, s), dim=-1))
    return torch.cat((head, x[..., 2 * half:]), dim=-1)
