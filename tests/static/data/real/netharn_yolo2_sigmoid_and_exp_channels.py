# ruff: noqa
# fmt: off
# Source: netharn 0.6.0 (PyPI sdist), netharn/models/yolo2/yolo2.py, lines 483-499 (verbatim), in a
# function that names what they use.
# YOLOv2's box decoding: the sigmoid goes into channels 0:2 of `coord` (the centre offsets), the
# `exp` reads channel 2 (the raw width; line 500 reads 3): no sigmoid output reaches an `exp`. Once
# flagged (review 16, hidden by default), as if the sigmoid had flowed into the whole tensor.
# expect-none: AMP001
import torch


def decode(self, cxywh_energy, device, nA, nH, nW, forloss=True):
    # Compute xc,yc, nW,nH, box_score on Tensor
    lin_x = torch.linspace(0, nW - 1, nW, device=device).repeat(nH, 1)
    lin_y = torch.linspace(0, nH - 1, nH, device=device).repeat(nW, 1).t().contiguous()
    anchor_w = self.anchors[:, 0].contiguous().view(1, nA, 1, 1)
    anchor_h = self.anchors[:, 1].contiguous().view(1, nA, 1, 1)

    if forloss:
        # TODO : rectify
        coord = torch.empty_like(cxywh_energy)
        coord[:, :, 0:2, :, :] = cxywh_energy[:, :, 0:2, :, :].sigmoid()    # cx,cy
        coord[:, :, 2:4, :, :] = cxywh_energy[:, :, 2:4, :, :]              # w,h

        with torch.no_grad():
            pred_boxes = torch.empty_like(cxywh_energy, device=device).view(-1, 4)
            pred_boxes[:, 0] = (coord[:, :, 0, :, :] + lin_x).view(-1)
            pred_boxes[:, 1] = (coord[:, :, 1, :, :] + lin_y).view(-1)
            pred_boxes[:, 2] = (coord[:, :, 2, :, :].exp() * anchor_w).view(-1)
    return coord, pred_boxes
