"""From a plan to running replicas: engine launch commands, Kubernetes manifests, Slurm batch scripts.

``render(spec, target)`` returns the files (name, role, text); ``write(files, out)`` writes them through a temporary
directory, so nothing is half-written. Flags are those of the pinned engine versions (``catalog/deploy/*.txt``)."""

from .render import DeploySpec, GeneratedFile, engine_command, flag_list, render, write

__all__ = ["DeploySpec", "GeneratedFile", "engine_command", "flag_list", "render", "write"]
