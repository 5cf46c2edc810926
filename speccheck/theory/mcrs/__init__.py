"""MCRS: max-conditioned rank selection (issue 7), theory side (numpy/scipy only).

Coordinates. u = Phi(s), y = 1 - u = Phibar(s) (kept separately: the target lives at y ~
Phibar(delta), far below float resolution of 1 - u). Drafts u_1..u_K are i.i.d. U(0, 1);
the target density in u is f(u) = rho(s) = exp(delta s - delta^2 / 2).

Rule. m = max_k u_k; given m the other K - 1 drafts are i.i.d. U(0, m). A policy
pi_r(m) (r = 1..K, sum_r pi_r(m) = 1) picks rank r (r = K: m itself; r < K: the r-th
smallest draft). Given m, the r-th smallest is m * Beta(r, K - r), so the selected density is

    g(x) = K x^(K-1) pi_K(x) + sum_{r<K} int_x^1 pi_r(m) K m^(K-2) beta_{r,K-r}(x/m) dm.

The m-integrand simplifies: K m^(K-2) beta_{r,K-r}(x/m) = C_r x^(r-1) n (m - x)^(n-1) with
n = K - r and C_r = K! / ((r-1)! (K-r)!) (the m powers cancel), so for pi_r constant on a
cell [a, b] (b > x)

    int_{max(a,x)}^b ... dm = pi_r C_r x^(r-1) [ (b - x)^n - (max(a, x) - x)^n ],

a polynomial: on each policy cell j = [a_j, a_{j+1}) g is a polynomial of degree <= K - 1 in x.
We store it as g(x) = sum_r C_r x^(r-1) Q_{r,j}(z), z = a_{j+1} - x >= 0, where
Q_{r,j}(z) = pi_{r,j} z^n + n sum_{k<n} binom(n-1, k) z^k M_{r,j,n-1-k} and
M_{r,j,p} = int_{a_{j+1}}^1 pi_r(m) (m - a_{j+1})^p dm >= 0: every coefficient is >= 0, so
evaluation has no cancellation. A constant policy pi_r = omega_r gives RASS's p_omega.

Optimal policy. P(accept) = int_0^1 min(f, g) du is concave and g is linear in pi, so on a
quadrature in u it is a linear program in K*G policy variables and M hinge variables
(max sum_i w_i h_i, h_i <= f(x_i), h_i <= g(x_i), sum_r pi_{r,j} = 1, pi >= 0); above 64
cells it is written with the moments M_{r,j,p} as extra variables (sparse, :func:`~speccheck.theory.mcrs.lp.moment_lp`).
``acceptance_mcrs`` then evaluates the returned policy exactly (closed-form g, crossings of
f and g located on each cell and refined, exact masses), not on the LP's quadrature.

Measurements for the gap that max-conditioning leaves live in :mod:`research.mcrs_research`
(theory/mcrs_gap_table.md, theory/mcrs_minmax_table.md): ``max_conditioned_bound`` (no policy of
the largest draft accepts more), ``top2_lp_acceptance`` (policy on the two largest drafts) and
``minmax_lp_acceptance`` (policy on the smallest and the largest draft).

Layout, by concept:

- :mod:`~speccheck.theory.mcrs.cells`: cell placement in m, cell lookup, rank coefficients;
- :mod:`~speccheck.theory.mcrs.policy`: :class:`MCRSPolicy` and its density g;
- :mod:`~speccheck.theory.mcrs.quadrature`: the LPs' quadrature (shared with MCRS-2);
- :mod:`~speccheck.theory.mcrs.lp`: the policy LP (dense and moment form, HiGHS);
- :mod:`~speccheck.theory.mcrs.policies`: the checked LP policies (:func:`mcrs_policy`);
- :mod:`~speccheck.theory.mcrs.acceptance`: exact acceptance of a policy;
- :mod:`~speccheck.theory.mcrs.kernel`: the ``mcrs`` kernel's shipped policies and their acceptance;
- :mod:`~speccheck.theory.mcrs.gap`: RASS's gap to the list bound that MCRS closes;
- :mod:`~speccheck.theory.mcrs.minmax`: MCRS-2, policies on (min-cell, max-cell) pairs.
"""


from speccheck.theory.mcrs.acceptance import acceptance_of_policy
from speccheck.theory.mcrs.cells import DEFAULT_G, GRID_KIND, GRID_KINDS, grid_kind, mcrs_edges, rank_coeffs
from speccheck.theory.mcrs.gap import gap_closed_mcrs
from speccheck.theory.mcrs.kernel import (
    EDGES_ATOL,
    KERNEL_DATA,
    KERNEL_DELTA_GRID,
    KERNEL_G,
    KERNEL_MAX_K,
    KERNEL_TOP_INDEX,
    LAYOUT_VERSION,
    acceptance_mcrs,
    kernel_bracket,
    kernel_policy,
    layout_key,
    package_entry,
    policy_checksum,
    shipped_policies,
)
from speccheck.theory.mcrs.lp import LP_TIME_LIMIT, MOMENT_FORM_ABOVE_G
from speccheck.theory.mcrs.policies import (
    CHECK_RTOL,
    LP_ATTEMPTS,
    PolicyCheckError,
    check_level,
    checked_policy,
    mcrs_policy,
)
from speccheck.theory.mcrs.policy import MCRSPolicy, constant_policy, mcrs_density, mcrs_log_density_s, uniform_policy

__all__ = [
    "acceptance_mcrs",
    "acceptance_of_policy",
    "check_level",
    "CHECK_RTOL",
    "checked_policy",
    "constant_policy",
    "DEFAULT_G",
    "EDGES_ATOL",
    "gap_closed_mcrs",
    "GRID_KIND",
    "grid_kind",
    "GRID_KINDS",
    "kernel_bracket",
    "KERNEL_DATA",
    "KERNEL_DELTA_GRID",
    "KERNEL_G",
    "KERNEL_MAX_K",
    "kernel_policy",
    "KERNEL_TOP_INDEX",
    "layout_key",
    "LAYOUT_VERSION",
    "LP_ATTEMPTS",
    "LP_TIME_LIMIT",
    "mcrs_density",
    "mcrs_edges",
    "mcrs_log_density_s",
    "mcrs_policy",
    "MCRSPolicy",
    "MOMENT_FORM_ABOVE_G",
    "package_entry",
    "policy_checksum",
    "PolicyCheckError",
    "rank_coeffs",
    "shipped_policies",
    "uniform_policy",
]
