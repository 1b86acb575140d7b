# Source: deep-image-matching 1.2.4 (PyPI sdist), its vendored DeDoDe: DeDoDe/utils.py, its torch imports
# (lines 5, 8) and sample_keypoints (130-188), verbatim; review 14.
import torch
import torch.nn.functional as F


@torch.no_grad()
def sample_keypoints(
    scoremap,
    num_samples=8192,
    device=get_best_device(),
    use_nms=True,
    sample_topk=False,
    return_scoremap=False,
    sharpen=False,
    upsample=False,
    increase_coverage=False,
):
    # scoremap = scoremap**2
    log_scoremap = (scoremap + 1e-10).log()
    if upsample:
        log_scoremap = F.interpolate(
            log_scoremap[:, None], scale_factor=3, mode="bicubic", align_corners=False
        )[
            :, 0
        ]  # .clamp(min = 0)
        scoremap = log_scoremap.exp()
    B, H, W = scoremap.shape
    if increase_coverage:
        weights = (-torch.linspace(-2, 2, steps=51, device=device) ** 2).exp()[
            None, None
        ]
        # 10000 is just some number for maybe numerical stability, who knows. :), result is invariant anyway
        local_density_x = F.conv2d(
            (scoremap[:, None] + 1e-6) * 10000,
            weights[..., None, :],
            padding=(0, 51 // 2),
        )
        local_density = F.conv2d(
            local_density_x, weights[..., None], padding=(51 // 2, 0)
        )[:, 0]
        scoremap = scoremap * (local_density + 1e-8) ** (-1 / 2)
    grid = get_grid(B, H, W, device=device).reshape(B, H * W, 2)
    if sharpen:
        laplace_operator = (
            torch.tensor([[[[0, 1, 0], [1, -4, 1], [0, 1, 0]]]], device=device) / 4
        )
        scoremap = scoremap[:, None] - 0.5 * F.conv2d(
            scoremap[:, None], weight=laplace_operator, padding=1
        )
        scoremap = scoremap[:, 0].clamp(min=0)
    if use_nms:
        scoremap = scoremap * (
            scoremap == F.max_pool2d(scoremap, (3, 3), stride=1, padding=1)
        )
    if sample_topk:
        inds = torch.topk(scoremap.reshape(B, H * W), k=num_samples).indices
    else:
        inds = torch.multinomial(
            scoremap.reshape(B, H * W), num_samples=num_samples, replacement=False
        )
    kps = torch.gather(grid, dim=1, index=inds[..., None].expand(B, num_samples, 2))
    if return_scoremap:
        return kps, torch.gather(scoremap.reshape(B, H * W), dim=1, index=inds)
    return kps
