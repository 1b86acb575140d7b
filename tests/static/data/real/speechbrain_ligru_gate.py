# ruff: noqa
# fmt: off
# Source: speechbrain 1.0.2 (PyPI), speechbrain/nnet/RNN.py, lines 13-14, 1201 and 1339-1370
# (verbatim; the docstring of `_ligru_cell` is shortened).
# Class (c): `zt = torch.sigmoid(zt)` is the update gate of a light GRU, interpolating two
# activations in linear space (`zt * ht + (1 - zt) * hcand`); it is not a log-space weight and
# nothing exponentiates or accumulates it.
# expect-none: AMP001
import torch
import torch.nn as nn


class LiGRU_Layer(torch.nn.Module):
    def _ligru_cell(self, w, ht):
        """Returns the hidden states for each time step."""
        hiddens = []

        # Sampling dropout mask
        drop_mask = self._sample_drop_mask(w)

        # Loop over time axis
        for k in range(w.shape[1]):
            gates = w[:, k] + self.u(ht)
            at, zt = gates.chunk(2, 1)
            zt = torch.sigmoid(zt)
            hcand = self.act(at) * drop_mask
            ht = zt * ht + (1 - zt) * hcand
            hiddens.append(ht)

        # Stacking hidden states
        h = torch.stack(hiddens, dim=1)
        return h
