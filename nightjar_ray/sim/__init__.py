"""Simulation: step-level environments and the discrete-event serving simulator.

Imports ``nightjar_ray.policy``, never ``nightjar_ray.engine``. Modules::

    envs, loop      step-level environments without queueing (policy tests, demo)
    hardware        GPU profiles, model shapes, memory plan (KV blocks, N_draft)
    roofline        forward-pass cost;  step_cost: one engine step (draft + verify + prefill)
    acceptance      per-request acceptance processes
    workload        request lengths, synthetic workloads, trace windows (nightjar_ray.workload)
    kv_pool         paged KV blocks with elastic expand / contract
    scheduler       continuous batching, chunked prefill, preemption by recompute
    elastic         draft offload / reload triggers (paper §6.1)
    server          the simulator: SimServer(setting, policy, options).run(workload)
    metrics         per-request records, gamma timeline, summary (TTFT, TPOT, E2E, ...)
    presets         the paper's three settings, datasets
    calibration     checks against the paper (Table 1, Table 3), C_switch profile
    experiments     Table 4 contenders, oracle;  tuning: default sweeps
    scenario        user-facing pydantic config;  report: markdown tables

See ``docs/simulator.md``.
"""
