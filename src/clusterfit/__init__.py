"""clusterfit: size, plan and simulate LLM serving clusters.

Data flows one way: catalogs -> specs -> physics (memory, time) -> plans -> simulation / reports.
"""

__version__ = "0.1.0"
