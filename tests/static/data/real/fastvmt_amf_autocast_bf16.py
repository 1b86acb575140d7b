# ruff: noqa
# fmt: off
# Source: github.com/mayuelala/FastVMT, diffsynth/pipelines/wan_video.py @ 97476b05c1a6c5f88a40bf0a0031e01b7e1081d5,
# lines 13, 28, 30, 337-338, 356-362, 372-388 and 466-497 (trimmed: docstrings, the tiled
# inter-frame branch and the tracking loss are left out; kept lines verbatim).
# Class (e): both methods run under an explicit `@torch.autocast(device_type="cuda", dtype=torch.bfloat16)`:
# the softmax and `torch.norm` run in float32 there, and the q@k^T product is bfloat16 (no
# float16 overflow), whatever dtype Q and K arrive in.
# expect-none: AMP002,AMP003,AMP006
import torch, os
import torch.nn.functional as F

class WanVideoPipeline(BasePipeline):
    @torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    def compute_tile_AMF(self, Q, K, sf, l=21, tau=3.0, tile=(3, 4)):
        # --- 1. Initialization and Reshaping ---
        f, h, w, D_h = K.shape
        S = h * w  # Total number of spatial locations (pixels)
        
        # Reshape Q and K from (F, H, W, D_h) to (F, S, D_h) for matrix multiplication
        Q = Q.view(f, S, D_h)
        K = K.view(f, S, D_h)

        amf_results = []
        tracking_loss_values = []

        # --- 2. Iterate Through Frames to Compute Motion Flow ---
        for i in range(f):
            K_windows_for_tracking = []
            # Compare frame `i` with subsequent frames up to `i + sf`
            for j in range(i, min(f, i + sf)):
                if i == j:
                    # --- 2a. Intra-frame (i == j) Attention (Full Attention) ---
                    # Compute attention matrix over the entire frame
                    A_ij = torch.matmul(Q[i], K[j].transpose(-1, -2)) / (D_h ** 0.5)
                    A_ij = F.softmax(A_ij * tau, dim=-1)

                    # Approximate displacement by taking a weighted average of grid coordinates
                    u_j_approx = torch.sum(A_ij * self.u, dim=-1)
                    v_j_approx = torch.sum(A_ij * self.v, dim=-1)

    @torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    def compute_tile_amf_loss(self, amf_ref_orin, amf_gen):
        # Ensure the shapes of reference and generated AMFs match
        assert amf_ref_orin.shape == amf_gen.shape, "AMF reference and generated tensors must have the same shape"
        
        # Reshape tensors from (B, S, 2) to (B, S*2) to compute norm over all components
        num_components = 2 * amf_ref_orin.shape[1]
        amf_ref_flat = amf_ref_orin.view(-1, num_components)
        amf_gen_flat = amf_gen.view(-1, num_components)
        
        # Calculate the difference, detaching the reference to avoid computing its gradients
        diff = amf_ref_flat.detach() - amf_gen_flat
        
        # Compute the squared L2 norm for each item in the batch
        squared_l2_norm = torch.norm(diff, p=2, dim=-1) ** 2
        
        # Apply weights and compute the final mean loss
        loss = (squared_l2_norm * self.weights).mean()
        
        return loss
