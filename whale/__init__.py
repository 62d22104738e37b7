"""whale: Weight-Harness Alternating LEarning.

Kept import-light on purpose: sandbox workers import `whale.harness.worker`, which must not pull in torch.
"""

__version__ = "0.1.0"
