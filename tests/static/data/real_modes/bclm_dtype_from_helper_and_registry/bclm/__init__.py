# bclm-pytorch 1.0.7 (Apache-2.0): the package, trimmed to the loader, the registry and the mixer.
