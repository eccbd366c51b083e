"""Placement and rent granularity (issue 13): replicas packed onto nodes, per-GPU quotes priced per GPU, cost ties
broken toward single-node replicas and headroom, and fit's layout holding the most sessions."""

import clusterfit as cf


def test_per_gpu_quote_pays_for_used_gpus_only():
    r = cf.plan(model="meta-llama/Llama-3.1-8B", isl=1000, osl=200, rate=20, ttft_ms=1000, tpot_ms=40,
                systems=["h200"]).recommended
    assert r is not None and r.rent_unit == "gpu" and r.idle_gpus == 0
    assert r.rented_gpus == r.total_gpus < 8
    assert abs(r.cost_per_hour - r.total_gpus * r.price_per_gpu_hour) < 1e-9
    assert len(r.placement) == r.replicas and all(len(p.nodes) == 1 for p in r.placement)


def test_whole_node_quote_packs_small_replicas():
    # a --price for a system the catalog does not price rents whole nodes (h200_nvl_8x; a --price for hgx_h200
    # keeps its catalog quote's per-GPU renting)
    r = cf.plan(model="meta-llama/Llama-3.1-8B", isl=1000, osl=200, rate=60, ttft_ms=1000, tpot_ms=40,
                systems=["h200_nvl_8x"], prices=["h200_nvl_8x=3.0"], failover=2).recommended
    assert r is not None and r.rent_unit == "node" and r.rented_gpus == 8 * r.nodes
    assert r.idle_gpus == r.rented_gpus - r.total_gpus
    used = {(p.nodes[0], g) for p in r.placement for g in p.gpus}
    assert len(used) == r.total_gpus                      # no GPU given twice
    assert r.serving_replicas > 1 and r.spare_replicas == 2 * min(8 // r.gpus_per_replica, r.serving_replicas)
    assert sum(p.role.startswith("spare") for p in r.placement) == r.spare_replicas
    assert r.headroom_requests_per_s >= r.full_load_requests_per_s


def test_cost_tie_prefers_single_node_replicas():
    res = cf.plan(model="zai-org/GLM-5.3", precisions=["fp8"], isl=8192, osl=1024, rate=2, ttft_ms=3000,
                  tpot_ms=60, systems=["h100", "h200", "b200"])
    by = {r.system: r for r in res.per_system}
    assert by["hgx_h200"].nodes_per_replica == 1 and by["dgx_b200"].nodes_per_replica == 1
    assert by["dgx_h100"].nodes_per_replica == 2


def test_fit_shows_the_layout_with_most_sessions():
    row = cf.fit(model="zai-org/GLM-5.3", precision="fp8", systems=["h200"], context=131072).results[0]
    assert row.max_sequences == 3 and row.most_sessions is not None
    assert row.most_sessions.max_sequences >= 8 and row.most_sessions.layout.dp == 8
    assert "TP ranks hold copies" in row.most_sessions.explanation


def test_spares_cover_a_node_loss_when_replicas_share_nodes():
    base = dict(model="meta-llama/Llama-3.1-8B", isl=1000, osl=200, rate=20, ttft_ms=1000, tpot_ms=40, failover=1)
    node = cf.plan(systems=["h200_nvl_8x"], prices=["h200_nvl_8x=3.0"], **base).recommended  # whole nodes: the
    assert node is not None and node.rent_unit == "node" and node.gpus_per_replica < 8  # node is the failure unit
    assert node.spare_replicas == min(8 // node.gpus_per_replica, node.serving_replicas)
    serving = {n for p in node.placement if p.role == "serving" for n in p.nodes}
    spares = {n for p in node.placement if p.role.startswith("spare") for n in p.nodes}
    assert serving and spares and not serving & spares and len(spares) == 1
    gpu = cf.plan(systems=["h200"], **base).recommended                 # per-GPU quote: one GPU instance fails alone
    assert gpu is not None and gpu.rent_unit == "gpu" and gpu.spare_replicas == 1
