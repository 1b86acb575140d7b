# flashdrr 0.6.0 (MIT), flashdrr/rendering/raycast.py: its imports, VolumeRaycaster whole, and the
# autocast blocks of its __main__ benchmark. VolumeRaycaster.forward renders with autocast off.
import math
from timeit import default_timer as timer
from typing import Tuple, Optional

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from torch import nn

from flashdrr.rendering.triton_raycast import FusedVolumeRenderer
from flashdrr.utils import make_2d


class VolumeRaycaster(nn.Module):
    """
    Differentiable C-arm volume raycaster for digitally reconstructed
    radiographs (DRRs).

    Given a 3D attenuation volume in IJK space and one or more camera view
    matrices in RAS space, ``VolumeRaycaster`` samples along each camera
    ray, integrates the attenuation using either Beer-Lambert or alpha
    compositing, and produces a 2D projection per view. Rendering is
    differentiable with respect to the input volume and view matrices.

    Two backends are supported:

    * A tiled Python-loop renderer using ``torch.grid_sample`` (default).
    * A fused CUDA/Triton renderer (``flashdrr.rendering.FusedVolumeRenderer``),
      selected per-call via ``forward(..., triton=True)``.

    A lightweight, prototype depth-aware scatter model
    (:class:`DepthAwareScatter`) can be attached for the last
    ``scatter`` channels of the volume.
    """

    def __init__(
            self,
            density_factor: float = 100.0,
            ray_samples: int = 256,
            resolution: Tuple[int, int] = (224, 224),
            use_checkpointing: bool = False,
            use_beer_lambert: bool = True,
            scatter: Optional[int] = None,  # or int | None if Python 3.10+
            i0: Optional[float] = None,
            fov: Optional[float] = 20.0,
            return_tau: Optional[bool] = False
    ) -> None:
        """
        Initialize the raycaster.

        Args:
            density_factor: Scalar multiplier applied to volume intensities
                before integration. Used by the alpha-compositing branch of
                the Python-loop backend and passed to the Triton backend.
            ray_samples: Number of samples taken along each camera ray.
            resolution: Output image size as ``(width, height)`` or a single
                int for a square image.
            use_checkpointing: If True, use ``torch.utils.checkpoint`` to
                trade compute for memory in the Python-loop backend (training
                only).
            use_beer_lambert: If True, integrate via the Beer-Lambert law
                and return ``1 - exp(-int(mu * dz))``. If False, use
                front-to-back alpha compositing (over operator).
            scatter: If not ``None``, treat the last ``scatter`` channels of
                the volume as scatter channels and process them with
                :class:`DepthAwareScatter` (prototype; not fully functional);
                the remaining channels are rendered with Beer-Lambert as
                primary. Only has an effect when ``use_beer_lambert`` is
                True.
            i0: Mean photon count at the source for the Gaussian-Poisson
                surrogate noise model. If ``None``, no noise is added.
            fov: Vertical field of view in degrees used to build the per-pixel
                ray directions.
            return_tau: If True, return the integrated attenuation ``tau``
                (the line integral ``sum(mu * dz)``) instead of the default
                attenuation image ``1 - exp(-tau)``. ``tau`` is not clamped
                to ``[0, 1]``, which makes it suitable for targets or losses
                defined in log-attenuation space. Only affects the
                Beer-Lambert branch with ``scatter=None``; the alpha
                compositing branch and the scatter branch ignore it.
        """
        super().__init__()
        self.density_factor = density_factor
        self.ray_samples = ray_samples
        self.use_checkpointing = use_checkpointing
        self.use_beer_lambert = use_beer_lambert
        self.scatter = None
        self.i0 = i0
        self.return_tau = return_tau
        if isinstance(resolution, tuple):
            self.w, self.h = resolution
        else:
            self.w, self.h = resolution, resolution

        # Z = torch.linspace(-1, 1, ray_samples)
        # W = torch.linspace(-1, 1, self.w)
        # H = torch.linspace(-1, 1, self.h)
        # self.samples = self.get_coord_grid(Z, H, W, perspective=True)
        self.register_buffer('dirs_cam', torch.empty(self.h, self.w, 3), persistent=False)
        self.triton_raycaster = FusedVolumeRenderer(self.ray_samples, self.density_factor, self.apply_poisson)

        if scatter is not None:
            self.scatter_channels = scatter
            self.scatter = DepthAwareScatter(scatter)

        self.set_fov(fov)

    def set_fov(self, fov: float) -> None:
        """
        Configure the camera's vertical field of view and refresh the
        per-pixel ray direction buffer ``self.dirs_cam``.

        The buffer is built on CPU in the image plane, normalized, then
        moved to the module's current device.

        Args:
            fov: Vertical field of view in degrees.
        """
        # Get the current device from the buffer
        device = self.dirs_cam.device

        # Do computation on CPU
        y, x = torch.meshgrid(
            torch.linspace(-1, 1, self.h),  # vertical: -1 (bottom) to 1 (top)
            torch.linspace(-1, 1, self.w),  # horizontal: -1 (left) to 1 (right)
            indexing='ij'
        )

        # Vertical FOV in radians
        fov_y = np.deg2rad(fov)
        aspect = self.w / self.h
        # Compute direction vectors in camera coordinates
        px = x * np.tan(fov_y / 2) * aspect
        py = y * np.tan(fov_y / 2)
        pz = torch.ones_like(px)
        dirs_cam = torch.stack([px, -py, pz], dim=-1)  # shape: (H, W, 3)

        # Normalize directions and move to device once at the end
        dirs_cam = F.normalize(dirs_cam, dim=-1).to(device)
        self.dirs_cam = dirs_cam

    @staticmethod
    def compute_clipping_distances(camera_matrix, volume_shape, ijk2ras, margin=30.0):
        """
        Compute near and far clipping distances for ray sampling based on camera matrix
        and volume bounds in IJK space.

        Parameters:
        -----------
        camera_matrix : torch.Tensor (B, 4, 4) or (4, 4)
            Batched or single 4x4 camera view matrix in RAS space
            Can be world-to-camera or camera-to-world (will be auto-detected)
        volume_shape : tuple of 3 ints
            Volume dimensions in IJK space (I, J, K)
        ijk2ras : torch.Tensor (4, 4)
            Transformation matrix from IJK to RAS coordinates
        margin : float, optional
            Safety margin to add to near/far distances in mm (default: 30.0).
            Positive values expand the clipping range.

        Returns:
        --------
        near : torch.Tensor (B,) or float
            Near clipping distance in mm (distance from camera to closest volume point)
        far : torch.Tensor (B,) or float
            Far clipping distance in mm (distance from camera to farthest volume point)
        """

        if not isinstance(camera_matrix, torch.Tensor):
            camera_matrix = torch.tensor(camera_matrix, dtype=torch.float32)
        if not isinstance(ijk2ras, torch.Tensor):
            ijk2ras = torch.tensor(ijk2ras, dtype=torch.float32)

        # Handle both batched and single camera matrices
        is_batched = camera_matrix.ndim == 3
        if not is_batched:
            camera_matrix = camera_matrix.unsqueeze(0)

        batch_size = camera_matrix.shape[0]
        device = camera_matrix.device

        ijk2ras = ijk2ras.to(dtype=camera_matrix.dtype, device=device)

        # Extract camera position from matrix
        # Check if this is camera-to-world (large translation) or world-to-camera (small translation)
        test_pos = camera_matrix[:, :3, 3]  # (B, 3)
        translation_norm = torch.norm(test_pos, dim=1)  # (B,)

        # For matrices with small translation, assume world-to-camera and invert
        needs_invert = translation_norm < 1.0

        cam_to_world_all = torch.inverse(camera_matrix)  # (B, 4, 4), batched invert — no loop needed

        pos_if_inv = cam_to_world_all[:, :3, 3]
        dir_if_inv = cam_to_world_all[:, :3, 2]
        pos_if_noninv = camera_matrix[:, :3, 3]
        dir_if_noninv = camera_matrix[:, :3, 2]

        mask = needs_invert.view(-1, 1)  # (B, 1), still a tensor — no Python branching
        cam_pos_ras = torch.where(mask, pos_if_inv, pos_if_noninv)
        view_dir = torch.where(mask, dir_if_inv, dir_if_noninv)

        # Normalize view directions
        view_dir = view_dir / torch.norm(view_dir, dim=1, keepdim=True)

        # Generate all 8 corners of the volume bounding box in IJK space
        I, J, K = volume_shape
        corners_ijk = torch.tensor([
            [0, 0, 0],
            [I - 1, 0, 0],
            [0, J - 1, 0],
            [I - 1, J - 1, 0],
            [0, 0, K - 1],
            [I - 1, 0, K - 1],
            [0, J - 1, K - 1],
            [I - 1, J - 1, K - 1]
        ], dtype=camera_matrix.dtype, device=device)  # (8, 3)

        # Transform corners to RAS space
        corners_homog = torch.cat([corners_ijk, torch.ones(8, 1, device=device)], dim=1)  # (8, 4)
        corners_ras = (ijk2ras @ corners_homog.T).T[:, :3]  # (8, 3)

        # Compute distances from camera to each corner projected along view direction
        # Broadcast: cam_pos_ras (B, 1, 3), corners_ras (1, 8, 3)
        to_corners = corners_ras.unsqueeze(0) - cam_pos_ras.unsqueeze(1)  # (B, 8, 3)
        distances = torch.sum(to_corners * view_dir.unsqueeze(1), dim=2)  # (B, 8)

        # Near is the minimum distance, far is the maximum distance
        near = torch.min(distances, dim=1).values - margin  # (B,)
        far = torch.max(distances, dim=1).values + margin  # (B,)

        # Ensure near is positive
        near = torch.clamp(near, min=0.1)

        # Return scalar if input was not batched
        if not is_batched:
            return near.item(), far.item()

        return near, far

    def apply_poisson(self, x: torch.Tensor) -> torch.Tensor:
        """
        Add a differentiable Gaussian approximation of Poisson noise to a
        transmission map or tau.

        If ``self.i0`` is ``None``, the input is returned unchanged (no
        noise is added). Otherwise, noise is applied in the photon-count
        domain. For transmission input, Gaussian noise with standard deviation
        ``sqrt(transmission / i0)`` is added and the result is clamped to
        ``[0, 1]``. For tau input (``self.return_tau`` is True), counts
        ``i0 * exp(-x)`` are perturbed by Gaussian noise of standard deviation
        ``sqrt(counts)``, clamped to at least one count, and converted back to
        tau; the noise is then added through a straight-through estimator so
        gradients still flow. This is a smooth surrogate for shot/Poisson
        noise and is fully differentiable.

        Args:
            x: Transmission values (post-primary, pre-noise) in ``[0, 1]``,
                or unbounded tau in log space when ``self.return_tau`` is
                True. Any shape is supported.

        Returns:
            torch.Tensor: Noisy transmission (clamped to ``[0, 1]``) or noisy
            tau, matching the mode selected by ``self.return_tau`` and the
            shape of ``x``. Returns the input unchanged when ``i0`` is
            ``None``.
        """
        if self.i0 is None:
            return x

        # Differentiable Gaussian approximation of Poisson
        if self.return_tau:
            with torch.no_grad():
                expected_counts = self.i0 * torch.exp(-x)
                std = torch.sqrt(expected_counts)
                noisy_counts = (
                    expected_counts + std * torch.randn_like(x)
                ).clamp_min(1.0)
                noisy_tau = -torch.log(noisy_counts / self.i0)

            return x + (noisy_tau - x).detach()
        else:
            transmission = torch.clamp(x, min=1e-8)
            std = torch.sqrt(transmission / self.i0)
            epsilon = torch.randn_like(transmission)
            noisy_transmission = transmission + std * epsilon
            return torch.clamp(noisy_transmission, 0, 1)

    def forward(self, vol: torch.Tensor, view_mat: torch.Tensor, ras2ijk: torch.Tensor,
                tile_h: int = 256, tile_w: int = 256, triton: bool = False) -> torch.Tensor:
        """
        Render one or more views of a (batched) 3D attenuation volume.

        Args:
            vol: Attenuation volume of shape ``(B, C, D, H, W)`` in IJK
                voxel space. The affine ``ras2ijk`` is what makes the volume
                RAS-aligned at runtime.
            view_mat: Camera-to-world view matrices in RAS, shape
                ``(B, 4, 4)`` or ``(N, 4, 4)`` where ``N = B * views_per_vol``.
                As a special case, ``N == 1`` is broadcast to ``B``. The
                clipping-distance computation also accepts world-to-camera
                matrices and auto-inverts them.
            ras2ijk: 4x4 affine mapping RAS to IJK coordinates.
            tile_h: Tile height used by the Python-loop backend to bound
                peak memory. Ignored if the image is smaller than
                ``(2*tile_h, 2*tile_w)``.
            tile_w: Tile width used by the Python-loop backend. See
                ``tile_h``.
            triton: If True, use the fused CUDA/Triton renderer
                (:class:`flashdrr.rendering.FusedVolumeRenderer`); otherwise
                use the tiled Python-loop renderer.

        Returns:
            torch.Tensor: Rendered projections of shape ``(N, C, H, W)``.
            These are attenuation images in ``[0, 1)`` by default, or the
            integrated attenuation ``tau`` when the raycaster was constructed
            with ``return_tau=True`` (see the constructor for the exact
            scope of that mode).
        """
        with torch.autocast(device_type='cuda', enabled=False):

            bs = vol.shape[0]
            N = view_mat.shape[0]

            if N < bs:
                raise ValueError(f"view_mat has {N} entries but batch size is {bs}")
            if N > bs and N % bs != 0:
                raise ValueError(f"N ({N}) must be a multiple of batch size ({bs})")

            # Expand density to match number of views
            views_per_vol = N // bs
            density = vol.permute(0, 1, 4, 3, 2)  # (B, C, W, H, D)
            if views_per_vol > 1:
                density = density.repeat_interleave(views_per_vol, dim=0)  # (N, C, W, H, D)

            # N==1 broadcast: expand view_mat to bs
            if N == 1:
                view_mat = view_mat.expand(bs, -1, -1)

            near, far = self.compute_clipping_distances(view_mat, vol.shape[2:], torch.inverse(ras2ijk))

            use_tiling = self.h >= 2 * tile_h or self.w >= 2 * tile_w
            _tile_h = tile_h if use_tiling else None
            _tile_w = tile_w if use_tiling else None

            vol_shape = torch.as_tensor(vol.shape[2:], device=vol.device, dtype=torch.float32)
            if triton:
                render_fn = lambda d, v, n, f: self.triton_raycaster(d, v, n, f, ras2ijk, vol_shape, self.dirs_cam, self.return_tau)
            else:
                render_fn = torch.vmap(
                    lambda d, v, n, f: self._render_single(d, v, n, f, ras2ijk, vol_shape, _tile_h, _tile_w),
                    in_dims=(0, 0, 0, 0),
                    randomness='different',  # required if apply_poisson uses torch.randn_like
                )

            return render_fn(density, view_mat, near, far)  # (N, C, H, W)

    def _render_single(
            self,
            density: torch.Tensor,  # (C, W, H, D) — single volume, vmapped over batch
            view_single: torch.Tensor,  # (4, 4)
            near: torch.Tensor,  # scalar
            far: torch.Tensor,  # scalar
            ras2ijk: torch.Tensor,  # (4, 4) shared constant
            vol_shape: torch.Tensor,  # (3,) shared constant
            tile_h: int,
            tile_w: int,
    ) -> torch.Tensor:
        """Render a single (volume, view) pair. Vmapped over batch dim.
        Returns (C, H, W).
        """
        # density = density.contiguous()

        step_size = 0.1 * (far - near) / self.ray_samples

        # --- Ray generation (no loop, no B dim) ---
        cam2world = view_single[:3, :3]
        cam_pos = view_single[:3, 3]

        device = view_single.device if isinstance(view_single, torch.Tensor) else "cpu"
        ras2ijk = ras2ijk.to(device, dtype=torch.float32)

        dirs_world = torch.einsum('ij,hwj->hwi', cam2world, self.dirs_cam)  # (H, W, 3)

        R = ras2ijk[:3, :3]
        t = ras2ijk[:3, 3]

        scale = 2.0 / (vol_shape - 1)  # (3,)

        dirs_ijk = dirs_world @ R.T  # (H, W, 3) @ (3, 3) — small, not (D,H,W,3)
        origin_ijk = cam_pos @ R.T + t  # (3,) — scalar op

        depths = near + (far - near) * torch.linspace(0, 1, self.ray_samples, device=density.device)  # (D,)

        ijk = scale * (origin_ijk + dirs_ijk.unsqueeze(0) * depths[:, None, None, None]) - 1

        # (D, H, W, 3) — no loop, fits in memory per-item
        # samples = cam_pos + dirs_world.unsqueeze(0) * depths[:, None, None, None]
        # ijk = ((2 * (samples @ R.T + t)) / (vol_shape - 1)) - 1  # (D, H, W, 3)

        # grid_sample expects (C, W, H, D) input and (1, D, H, W, 3) grid
        density_b = density.unsqueeze(0)  # (1, C, W, H, D)

        def render_tile(coords_tile):
            # coords_tile: (1, D, h, w, 3)
            dens_tile = F.grid_sample(density_b, coords_tile, align_corners=False)  # (1, C, D, h, w)

            if self.use_beer_lambert:
                if self.scatter:
                    I_out_no_scatter = 1.0 - self.apply_poisson(
                        torch.exp(-torch.sum(dens_tile[:, :-self.scatter_channels] * step_size, dim=2))
                    )
                    I_out, _, _, _ = self.scatter(dens_tile[:, -self.scatter_channels:], step_size)
                    return torch.cat([I_out_no_scatter, 1.0 - I_out], dim=1).squeeze(0)  # (C, h, w)
                else:
                    tau = torch.sum(dens_tile * step_size, dim=2)
                    if self.return_tau:
                        return self.apply_poisson(tau).squeeze(0)
                    else:
                        return (1.0 - self.apply_poisson(torch.exp(-tau))).squeeze(0)
            else:
                d = self.density_factor * dens_tile / self.ray_samples
                transmission = torch.cumprod(1.0 - d, dim=2)
                weight = d * transmission
                w_sum = weight.sum(dim=2)
                alpha = 1.0 - torch.prod(1.0 - d, dim=2)
                return (weight.sum(dim=2) / (w_sum + 1e-6) * alpha).squeeze(0)  # (C, h, w)

        if tile_h is None or (self.h < 2 * tile_h and self.w < 2 * tile_w):
            # No tiling — single call
            grid = ijk.permute(0, 1, 2, 3).unsqueeze(0)  # (1, D, H, W, 3)
            if self.use_checkpointing and self.training:
                out = cp.checkpoint(render_tile, grid, use_reentrant=False)
            else:
                out = render_tile(grid)
        else:
            # Tile over H and W
            row_outputs = []
            for h_start in range(0, self.h, tile_h):
                h_end = min(h_start + tile_h, self.h)
                col_outputs = []
                for w_start in range(0, self.w, tile_w):
                    w_end = min(w_start + tile_w, self.w)
                    grid = ijk[:, h_start:h_end, w_start:w_end, :].unsqueeze(0)  # (1, D, h, w, 3)
                    if self.use_checkpointing and self.training:
                        tile_out = cp.checkpoint(render_tile, grid, use_reentrant=False)
                    else:
                        tile_out = render_tile(grid)
                    col_outputs.append(tile_out)
                row_outputs.append(torch.cat(col_outputs, dim=-1))
            out = torch.cat(row_outputs, dim=-2)  # (C, H, W)

        return out


if __name__ == '__main__':
    ren = VolumeRaycaster(scatter=None, resolution=(512, 512), i0=None).cuda()
    mu, view_mat, ras2ijk = load_example()
    with torch.no_grad():
        with torch.autocast(device_type="cuda"):
            _ = ren(mu.expand(1, 1, -1, -1, -1), view_mat=view_mat, ras2ijk=ras2ijk, triton=True)
            _ = ren(mu.expand(1, 1, -1, -1, -1), view_mat=view_mat, ras2ijk=ras2ijk, triton=True)
            _ = ren(mu.expand(1, 1, -1, -1, -1), view_mat=view_mat, ras2ijk=ras2ijk, triton=True)


        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            _ = ren(mu.expand(1, 1, -1, -1, -1), view_mat=view_mat, ras2ijk=ras2ijk, triton=True)
            _ = ren(mu.expand(1, 1, -1, -1, -1), view_mat=view_mat, ras2ijk=ras2ijk, triton=True)
            _ = ren(mu.expand(1, 1, -1, -1, -1), view_mat=view_mat, ras2ijk=ras2ijk, triton=True)
