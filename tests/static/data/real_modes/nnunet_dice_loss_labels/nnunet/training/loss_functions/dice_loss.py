# Source: nnunet 1.7.1 (PyPI sdist), nnunet/training/loss_functions/dice_loss.py, lines 16-22,
# 100-152, 155-186 and 302-346 (verbatim but for the parts marked `...` and the variant at the end;
# `sum_tensor` from nnunet/utilities/tensor_utilities.py, lines 20-28; review 9).
# False positive (review 9): AMP005 on `denominator + 1e-8` under the trainers' float16 autocast. The
# labels `y`/`gt` are the data's (float32 or integer), not an activation, and `apply_nonlin` is the
# softmax it is handed, not a half-precision layer: `tp`, `fp` and `fn` are float32.
import torch
from nnunet.utilities.nd_softmax import softmax_helper
from torch import nn
import numpy as np


def sum_tensor(inp, axes, keepdim=False):
    axes = np.unique(axes).astype(int)
    if keepdim:
        for ax in axes:
            inp = inp.sum(int(ax), keepdim=True)
    else:
        for ax in sorted(axes, reverse=True):
            inp = inp.sum(int(ax))
    return inp


def get_tp_fp_fn_tn(net_output, gt, axes=None, mask=None, square=False):
    if axes is None:
        axes = tuple(range(2, len(net_output.size())))

    shp_x = net_output.shape
    shp_y = gt.shape

    with torch.no_grad():
        if len(shp_x) != len(shp_y):
            gt = gt.view((shp_y[0], 1, *shp_y[1:]))

        if all([i == j for i, j in zip(net_output.shape, gt.shape)]):
            # if this is the case then gt is probably already a one hot encoding
            y_onehot = gt
        else:
            gt = gt.long()
            y_onehot = torch.zeros(shp_x, device=net_output.device)
            y_onehot.scatter_(1, gt, 1)

    tp = net_output * y_onehot
    fp = net_output * (1 - y_onehot)
    fn = (1 - net_output) * y_onehot
    tn = (1 - net_output) * (1 - y_onehot)

    if mask is not None:
        tp = torch.stack(tuple(x_i * mask[:, 0] for x_i in torch.unbind(tp, dim=1)), dim=1)
        fp = torch.stack(tuple(x_i * mask[:, 0] for x_i in torch.unbind(fp, dim=1)), dim=1)
        fn = torch.stack(tuple(x_i * mask[:, 0] for x_i in torch.unbind(fn, dim=1)), dim=1)
        tn = torch.stack(tuple(x_i * mask[:, 0] for x_i in torch.unbind(tn, dim=1)), dim=1)

    if square:
        tp = tp ** 2
        fp = fp ** 2
        fn = fn ** 2
        tn = tn ** 2

    if len(axes) > 0:
        tp = sum_tensor(tp, axes, keepdim=False)
        fp = sum_tensor(fp, axes, keepdim=False)
        fn = sum_tensor(fn, axes, keepdim=False)
        tn = sum_tensor(tn, axes, keepdim=False)

    return tp, fp, fn, tn


class SoftDiceLoss(nn.Module):
    def __init__(self, apply_nonlin=None, batch_dice=False, do_bg=True, smooth=1.):
        """
        """
        super(SoftDiceLoss, self).__init__()

        self.do_bg = do_bg
        self.batch_dice = batch_dice
        self.apply_nonlin = apply_nonlin
        self.smooth = smooth

    def forward(self, x, y, loss_mask=None):
        shp_x = x.shape

        if self.batch_dice:
            axes = [0] + list(range(2, len(shp_x)))
        else:
            axes = list(range(2, len(shp_x)))

        if self.apply_nonlin is not None:
            x = self.apply_nonlin(x)

        tp, fp, fn, _ = get_tp_fp_fn_tn(x, y, axes, loss_mask, False)

        nominator = 2 * tp + self.smooth
        denominator = 2 * tp + fp + fn + self.smooth

        dc = nominator / (denominator + 1e-8)
        return -dc.mean()


class DC_and_CE_loss(nn.Module):
    def __init__(self, soft_dice_kwargs, ce_kwargs, aggregate="sum", square_dice=False, weight_ce=1, weight_dice=1,
                 log_dice=False, ignore_label=None):
        super(DC_and_CE_loss, self).__init__()
        self.weight_dice = weight_dice
        self.ignore_label = ignore_label
        self.dc = SoftDiceLoss(apply_nonlin=softmax_helper, **soft_dice_kwargs)
        self.precision = PrecisionLoss(apply_nonlin=softmax_helper)

    def forward(self, net_output, target):
        mask = None
        dc_loss = self.dc(net_output, target, loss_mask=mask) if self.weight_dice != 0 else 0
        return dc_loss + self.precision(net_output, target)


# Variant (not in the source): the handed callable applied to predictions upcast first stays float32,
# and a guard on the half-precision predictions themselves is flagged.
class PrecisionLoss(nn.Module):
    def __init__(self, apply_nonlin=None):
        super().__init__()
        self.apply_nonlin = apply_nonlin

    def forward(self, x, y):
        p = self.apply_nonlin(x.float())
        tp = (p * y).sum()
        h = torch.sigmoid(x)
        entropy = -(h * torch.log(h + 1e-8)).mean()  # expect: AMP005
        return tp - (p * torch.log(p + 1e-8)).mean() + entropy
