"""The `clusterfit simulate` command."""
