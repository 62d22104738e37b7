"""Harness search: the filesystem archive, proposers, and one search iteration with paired acceptance."""
