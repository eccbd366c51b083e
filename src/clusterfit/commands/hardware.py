"""The `clusterfit hardware` command."""
