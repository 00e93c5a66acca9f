"""VIP analysis, cache policies, tiered cache plans and the communication simulator."""
from .plan import (Budget, CachePlan, PlanInfo, PlanMeta, PlanOptions, PlanRequest, build_plans, check_plan,
                   load_plan, load_plans, partition_identity, read_plan_info, save_plans)
from .policies import (PolicyContext, available_policies, get_policy, policy_scores, rank_vertices,
                       register_policy)
from .simulator import SimulationResult, plot_volume, simulate
from .vip import (expected_accesses, expected_nodes_per_type, inclusion_probabilities, neighbour_sum, pick_weights,
                  relation_degrees)
from .workload import Workload

__all__ = [
    "Budget", "CachePlan", "PlanInfo", "PlanMeta", "PlanOptions", "PlanRequest", "PolicyContext", "SimulationResult",
    "Workload", "available_policies", "build_plans", "check_plan", "expected_accesses", "expected_nodes_per_type",
    "get_policy", "inclusion_probabilities", "load_plan", "load_plans", "neighbour_sum", "partition_identity",
    "pick_weights", "plot_volume", "policy_scores", "rank_vertices", "read_plan_info", "register_policy",
    "relation_degrees", "save_plans", "simulate",
]
