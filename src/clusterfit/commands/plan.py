"""The `clusterfit plan` command."""
