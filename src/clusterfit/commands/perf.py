"""The `clusterfit perf` command."""
