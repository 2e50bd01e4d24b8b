"""Simulation: step-level environments and the discrete-event serving simulator.

Runs the pure parts the engine runs (``nightjar_ray.driver``, ``memory``, ``policy``) on
``nightjar_ray.workload``'s requests; never imports ``nightjar_ray.engine`` or vLLM::

    envs, loop      step-level environments without queueing (policy tests and benchmarks)
    hardware        GPU profiles, model shapes, memory plan (KV blocks, N_draft)
    roofline        forward-pass cost;  step_cost: one engine step (draft + verify + prefill)
    acceptance      per-request acceptance processes
    workload        request lengths, synthetic workloads, trace windows (nightjar_ray.workload)
    kv_pool         paged KV blocks with elastic expand / contract
    scheduler       continuous batching, chunked prefill, preemption by recompute
    elastic         draft offload / reload: memory's triggers (§6.1), their costs (§6.2-6.4)
    server          the simulator: SimServer(setting, policy, options).run(workload)
    metrics         per-request records, gamma timeline, summary (TTFT, TPOT, E2E, ...)
    presets         the paper's three settings, datasets
    calibration     checks against the paper (Table 1, Table 3), C_switch profile
    experiments     Table 4 contenders, oracle
    suite           the named workloads of the suite;  suite_report: running and judging it
    scenario        user-facing pydantic config;  report: markdown tables

See ``docs/simulator.md``.
"""
