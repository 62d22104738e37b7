"""Harness runtime: records, static validation, sandboxed workers, and the rollout runner.

Must stay free of torch imports: `whale.harness.worker` runs in bare sandbox processes.
"""
