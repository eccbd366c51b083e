"""CLI commands, one module each; each registers itself on clusterfit.cli.app."""
