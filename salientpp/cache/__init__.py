"""VIP analysis, cache policies, tiered cache plans and the communication simulator."""
from .accesses import loader_seed
from .plan import (Budget, CachePlan, PlanMeta, build_plans, load_plan, load_plans, parse_bytes,
                   partition_identity, save_plans)
from .policies import (PolicyContext, available_policies, get_policy, policy_scores, rank_vertices,
                       register_policy)
from .simulator import SimulationResult, plot_volume, simulate
from .vip import expected_accesses, inclusion_probabilities, neighbour_sum, pick_weights
from .workload import Workload, parse_fanouts

__all__ = [
    "Budget", "CachePlan", "PlanMeta", "PolicyContext", "SimulationResult", "Workload", "available_policies",
    "build_plans", "expected_accesses", "get_policy", "inclusion_probabilities", "load_plan", "load_plans",
    "loader_seed", "neighbour_sum", "parse_bytes", "parse_fanouts", "partition_identity", "pick_weights",
    "plot_volume", "policy_scores", "rank_vertices", "register_policy", "save_plans", "simulate",
]
