"""PyTorch integration of mactile (needs torch)."""
