"""The `clusterfit fit` command."""
