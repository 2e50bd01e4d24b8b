"""Workloads: what is asked of a server, and what each request measured (pure Python).

Shared by the simulator (``nightjar_ray.sim``) and the load generator
(``nightjar_ray.loadgen``)::

    spec        RequestSpec: one request of a workload (arrival, lengths, prompt)
    record      RequestRecord: one request's measured timeline (TTFT, TPOT, E2E)
    trace       reader of Azure-format traces (one timestamp rule, sorted by arrival)
    arrivals    arrival processes (Poisson, gamma, step, ramp) and gap sequences
"""

from nightjar_ray.workload.record import RequestRecord
from nightjar_ray.workload.spec import Prompt, RequestSpec

__all__ = ["Prompt", "RequestRecord", "RequestSpec"]
